"""``lm-eval:NAME`` tasks: lm-eval's own prompts (as ``build_all_requests`` sends them), filters and
metrics, the splits, the identity and the refusals; over small YAMLs in an include path (offline, fast)."""

from __future__ import annotations

import sys

import pytest
from lmevalyamls import ADD, MC, write_tasks

from softeval.errors import UserError
from softeval.run.config import LM_EVAL, RunConfig
from softeval.run.validate import check_config
from softeval.tasks import get_task
from softeval.tasks.lmeval import FEWSHOT_SEED
from softeval.tasks.lmeval_bridge import config_sha256

pytest.importorskip("lm_eval")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(write_tasks(tmp_path_factory.mktemp("lmeval")))


def loaded(name: str, folder: str):
    task = get_task(f"lm-eval:{name}", folder)
    return task, task.splits("offline")


@pytest.mark.parametrize("k", [0, 3])
def test_prompts_are_those_lm_eval_sends(folder, k):
    task, splits = loaded(ADD, folder)
    picked = [splits.eval[i] for i in (7, 2, 5)]  # any order: the shots are drawn in document order
    ours = task.contexts(picked, k, None)
    lm_task = task.extra["lm_eval"].built()
    lm_task.set_config(key="num_fewshot", value=k)
    lm_task.set_fewshot_seed(FEWSHOT_SEED)
    lm_task.build_all_requests(samples=[2, 5, 7])
    sent = [inst.arguments[0] for inst in lm_task.instances]  # docs 2, 5, 7 in order (doc_id counts them)
    assert [inst.doc for inst in lm_task.instances] == [splits.eval[i].fields["doc"] for i in (2, 5, 7)]
    assert ours == [sent[2], sent[0], sent[1]]
    assert ours[0].count("Q: ") == k + 1 and ours[0].startswith("Add the numbers.")


def test_strict_is_the_strict_filter_its_fallback_no_answer(folder):
    task, splits = loaded(ADD, folder)
    item = splits.eval[0]  # "100 + 1" -> 101
    assert task.target(item) == " = 101" and task.stop == ("\n",) and task.max_new_tokens == 6
    assert item.gold == "101"  # shown as the strict filter reads the target (gsm8k: the number after ####)
    assert task.strict(" = 101", item) == "101" and task.match("101", item)
    assert task.strict("101", item) is None and task.lenient("101", item) == "101"
    assert task.lenient("it is 7 or 101", item) == "101"  # group_select -1: the last number
    assert not task.match("100", item) and not task.match(None, item)
    metrics = task.extra["item_metrics"]("101", item)
    assert metrics == {"strict-match": {"answer": "[invalid]", "exact_match": 0.0},
                       "flexible-extract": {"answer": "101", "exact_match": 1.0}}


def test_splits_tune_on_train_or_validation_never_on_scored(folder):
    _task, add = loaded(ADD, folder)
    assert (add.tune_name, add.eval_name, len(add.tune), len(add.eval)) == ("train", "test", 16, 10)
    mc_task, mc = loaded(MC, folder)
    assert (mc.tune_name, mc.eval_name, len(mc.tune), len(mc.eval)) == ("validation", "test", 12, 8)
    item = mc.eval[1]  # label 51 % 4 = 3
    assert mc_task.cloze_options(item) == (["red", "green", "blue", "black"], 3)
    assert mc_task.target(item) == " black" and item.gold == "black"
    assert mc_task.strict("black.\nmore", item) == "black" and mc_task.strict("a black one", item) is None
    assert mc_task.lenient("a black one", item) == "black" and mc_task.lenient("red or blue", item) is None


def test_identity_is_lm_evals_version_and_the_configs_digest(folder, tmp_path):
    import lm_eval

    config = RunConfig(model="m", task=f"lm-eval:{ADD}", include_path=folder)
    assert config.options("zero-shot")[LM_EVAL] == {"version": lm_eval.__version__,
                                                     "config_sha256": config_sha256(ADD, folder)}
    assert LM_EVAL not in RunConfig(model="m", task="gsm8k").options("zero-shot")
    other = write_tasks(tmp_path / "changed")
    before = config_sha256(ADD, str(other))
    yaml = other / "toy_add.yaml"
    yaml.write_text(yaml.read_text().replace("max_gen_toks: 6", "max_gen_toks: 7"))
    assert config_sha256(ADD, str(other)) != before


def refusal(name: str, folder: str, source: str = "offline") -> str:
    with pytest.raises(UserError) as err:
        get_task(f"lm-eval:{name}", folder).splits(source)
    assert "\n" not in str(err.value)
    return str(err.value)


def one_yaml(folder, name: str, text: str) -> str:
    """A folder of its own (lm-eval's index of a folder is built once per process) holding one YAML."""
    folder.mkdir()
    (folder / f"{name}.yaml").write_text(text)
    return str(folder)


def test_refusals_name_the_fix(folder, tmp_path):
    hub_only = one_yaml(tmp_path / "hub", "hubonly", "task: hubonly\ndataset_path: someone/data\n"
                        "output_type: generate_until\ntest_split: test\ndoc_to_text: q\ndoc_to_target: a\n")
    message = refusal("hubonly", hub_only)
    assert "someone/data" in message and "--source hub" in message and "--include-path" in message
    rolling = one_yaml(tmp_path / "rolling", "rolling", "task: rolling\ndataset_path: json\n"
                       "output_type: loglikelihood_rolling\ntest_split: test\ndoc_to_text: q\ndoc_to_target: a\n")
    assert "loglikelihood_rolling" in refusal("rolling", rolling)
    group = write_tasks(tmp_path / "group")
    (group / "grp.yaml").write_text(f"group: grp\ntask:\n  - {ADD}\n")
    assert "is an lm-eval group" in refusal("grp", str(group))
    bad = write_tasks(tmp_path / "bad")
    (bad / "toy_add.yaml").write_text((bad / "toy_add.yaml").read_text().replace("metric: exact_match",
                                                                                  "aggregation_only: 1"))
    assert refusal(ADD, str(bad)).startswith(f"lm-eval could not build lm-eval:{ADD}: ")
    assert "--source offline or hub" in refusal(ADD, folder, source="data.jsonl")
    with pytest.raises(UserError, match="no such folder"):
        get_task(f"lm-eval:{ADD}", str(tmp_path / "missing"))


def test_unknown_task_names_the_listing(folder):
    with pytest.raises(UserError, match=r"unknown lm-eval task 'no_such_task_x'.*softeval tasks --lm-eval"):
        get_task("lm-eval:no_such_task_x", folder)


def test_a_missing_extra_is_one_line_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # import lm_eval raises ImportError
    from softeval.tasks import lmeval_bridge

    with pytest.raises(UserError, match=r'pip install "softeval\[lm-eval\]"'):
        lmeval_bridge.lm_eval_module()


def test_include_path_is_for_lm_eval_tasks_only(folder):
    with pytest.raises(UserError, match="is for lm-eval tasks"):
        check_config(RunConfig(model="smollm2-135m-instruct", task="gsm8k", include_path=folder))


def test_the_shown_gold_is_the_strict_filters_reading_of_the_target_else_the_target(tmp_path):
    folder = write_tasks(tmp_path / "nofilter")
    yaml = folder / "toy_add.yaml"
    yaml.write_text(yaml.read_text().split("filter_list:")[0] + "metadata:\n  version: 1.0\n")
    task, splits = loaded(ADD, str(folder))
    assert splits.eval[0].gold == "= 101"  # no regex filter: the target as lm-eval writes it
    unread = write_tasks(tmp_path / "unread")
    yaml = unread / "toy_add.yaml"
    yaml.write_text(yaml.read_text().replace('doc_to_target: "= {{a}}"', 'doc_to_target: "is {{a}}"'))
    assert loaded(ADD, str(unread))[1].eval[0].gold == "is 101"  # the strict regex does not read it: as is
