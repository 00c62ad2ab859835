"""The files an lm-eval task's config resolves (lmeval_bridge.task_files), in the usual lm-eval layout: a task YAML
in a folder that includes ``../base/_base.yaml``, which names ``!function utils.fn`` in ``../base/utils.py``. Each
is part of the task's identity; a ``!function`` module outside the include folder and lm-eval's own tasks is refused
before its top level runs; a module that is not there, and a YAML lm-eval cannot read, are one line naming them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from lmevalyamls import write_jsonl
from tiny import tiny_lm

from softeval.errors import UserError
from softeval.run.config import LM_EVAL, RunConfig
from softeval.run.pipeline import run_job
from softeval.store.identity import identity_diff
from softeval.tasks import get_task
from softeval.tasks.lmeval_bridge import config_sha256, entry, listing, task_files

pytest.importorskip("lm_eval")

BASE_YAML = """dataset_path: json
dataset_kwargs:
  data_files:
    train: {folder}/train.jsonl
    test: {folder}/test.jsonl
output_type: generate_until
training_split: train
test_split: test
process_docs: !function utils.fn
doc_to_text: "Q: {{{{q}}}}\\nA:"
doc_to_target: " {{{{a}}}}"
metric_list:
  - metric: exact_match
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 3
metadata:
  version: 1.0
"""
UTILS = """def fn(dataset):
    return dataset.map(lambda d: {{**d, "q": {prefix!r} + d["q"]}})
"""


def layout(root: Path, name: str = "mytask", prefix: str = "old: ") -> Path:
    """``root/tasks/NAME.yaml`` including ``../base/_base.yaml``, which names ``utils.fn`` in ``root/base``; the
    include path is ``root``."""
    base = root / "base"
    (root / "tasks").mkdir(parents=True)
    base.mkdir()
    write_jsonl(base / "train.jsonl", [{"q": f"{i} + 1", "a": str(i + 1)} for i in range(8)])
    write_jsonl(base / "test.jsonl", [{"q": f"{i} + 2", "a": str(i + 2)} for i in range(100, 106)])
    (base / "_base.yaml").write_text(BASE_YAML.format(folder=base))
    (base / "utils.py").write_text(UTILS.format(prefix=prefix))
    (base / "helpers.py").write_text("SHARED = 1\n")
    (root / "tasks" / f"{name}.yaml").write_text(f"include: ../base/_base.yaml\ntask: {name}\n")
    return root


def test_every_included_yaml_and_function_module_is_the_tasks(tmp_path):
    root = layout(tmp_path / "lay")
    (root / "base" / "utils.py").write_text("import helpers\n" + (root / "base" / "utils.py").read_text())
    files = task_files(entry("mytask", str(root)), str(root))
    assert files.yamls == ((root / "tasks" / "mytask.yaml").resolve(), (root / "base" / "_base.yaml").resolve())
    assert files.modules == ((root / "base" / "utils.py").resolve(),)
    assert files.helpers == ((root / "base" / "utils.py").resolve(), (root / "base" / "helpers.py").resolve())


@pytest.mark.parametrize("edited", ["base/utils.py", "base/helpers.py", "base/_base.yaml"])
def test_an_edited_helper_or_included_yaml_is_another_identity(tmp_path, edited):
    root = layout(tmp_path / "lay")
    (root / "base" / "utils.py").write_text("import helpers\n" + (root / "base" / "utils.py").read_text())
    before = config_sha256("mytask", str(root))
    path = root / edited
    path.write_text(path.read_text().replace("old: ", "new: ").replace("SHARED = 1", "SHARED = 2")
                    .replace("max_gen_toks: 3", "max_gen_toks: 4"))
    assert config_sha256("mytask", str(root)) != before


def test_a_task_whose_helpers_lie_beside_its_yaml_keeps_its_digest(tmp_path):
    """Runs recorded before the other files were digested stay finished: nothing new is digested for them."""
    import hashlib

    from softeval.tasks.lmeval_bridge import raw_config

    folder = tmp_path / "flat"
    folder.mkdir()
    (folder / "utils.py").write_text(UTILS.format(prefix="p: "))
    write_jsonl(folder / "train.jsonl", [{"q": "1", "a": "1"}])
    write_jsonl(folder / "test.jsonl", [{"q": "1", "a": "1"}])
    (folder / "flat.yaml").write_text("task: flat\n" + BASE_YAML.format(folder=folder))
    found = entry("flat", str(folder))
    old = hashlib.sha256(json.dumps(raw_config(found), sort_keys=True, default=str).encode())  # the digest before
    old.update(b"\0utils.py\0" + (folder / "utils.py").read_bytes())
    for path in (folder / "train.jsonl", folder / "test.jsonl"):
        old.update(b"\0" + str(path).encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest() + b"\0")
    assert config_sha256("flat", str(folder)) == old.hexdigest()


def test_an_edited_utils_py_refuses_the_finished_run_instead_of_skipping_it(tmp_path):
    """The issue's case, as a user runs it: the same command after utils.py changed the prompts."""
    root = layout(tmp_path / "lay")
    config = RunConfig(model="tiny-0", task="lm-eval:mytask", include_path=str(root), methods=("zero-shot",),
                       limit=2, out=str(tmp_path / "runs"), eval_batch_size=2, chat_template="off")
    lm = tiny_lm()
    first = run_job(config, lm=lm)[0]
    assert first["config"][LM_EVAL]["config_sha256"] == config_sha256("mytask", str(root))
    utils = root / "base" / "utils.py"
    utils.write_text(utils.read_text().replace("old: ", "new: "))
    with pytest.raises(UserError, match=r"lm_eval\.config_sha256: the contents differ") as err:
        run_job(config, lm=lm)
    assert "\n" not in str(err.value)
    assert run_job(config.__class__(**{**config.__dict__, "force": True}), lm=lm)[0]["config"][LM_EVAL] != \
        first["config"][LM_EVAL]


def test_identity_diff_says_which_part_of_an_lm_eval_identity_differs():
    old = {"lm_eval": {"version": "0.4.13", "config_sha256": "a" * 64}}
    new = {"lm_eval": {"version": "0.4.13", "config_sha256": "b" * 64}}
    assert identity_diff(old, new) == [f"lm_eval.config_sha256: the contents differ ({'a' * 12}… -> {'b' * 12}…)"]


def test_a_function_module_outside_the_include_folder_is_refused_before_it_runs(tmp_path):
    marker = tmp_path / "ran"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n\ndef fn(d):\n    return d\n")
    root = layout(tmp_path / "lay")
    dotted = "." + ".".join(elsewhere.parts[1:]) + ".evil.fn"  # lm-eval reads the dots as an absolute path
    base = root / "base" / "_base.yaml"
    base.write_text(base.read_text().replace("!function utils.fn", f"!function {dotted}"))
    for attempt in (lambda: get_task("lm-eval:mytask", str(root)).splits("offline"),
                    lambda: RunConfig(model="m", task="lm-eval:mytask", include_path=str(root)).options("zero-shot")):
        with pytest.raises(UserError, match=r"its module .*evil\.py lies outside --include-path") as err:
            attempt()
        assert "\n" not in str(err.value) and str(base.resolve()) in str(err.value)
    assert not marker.exists()


def test_a_module_in_the_include_folder_beside_an_included_yaml_runs(tmp_path):
    task = get_task("lm-eval:mytask", str(layout(tmp_path / "lay", prefix="helped: ")))
    assert task.splits("offline").eval[0].fields["text"].startswith("Q: helped: 100 + 2")


def test_a_function_module_that_is_not_there_is_one_line(tmp_path):
    root = layout(tmp_path / "lay")
    base = root / "base" / "_base.yaml"
    base.write_text(base.read_text().replace("!function utils.fn", "!function nomod.fn"))
    with pytest.raises(UserError, match=r"!function nomod\.fn: no module nomod .*put nomod\.py beside the YAML") as e:
        get_task("lm-eval:mytask", str(root)).splits("offline")
    assert "\n" not in str(e.value)


def test_the_cli_refuses_a_missing_module_with_one_line_and_exit_2(tmp_path, capsys):
    from softeval.cli.app import main

    root = layout(tmp_path / "lay")
    base = root / "base" / "_base.yaml"
    base.write_text(base.read_text().replace("!function utils.fn", "!function nomod.fn"))
    assert main(["eval", "--model", "smollm2-135m-instruct", "--task", "lm-eval:mytask", "--include-path", str(root),
                 "--method", "zero-shot", "--limit", "2", "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "!function nomod.fn: no module nomod" in err


def test_a_yaml_that_cannot_be_read_is_named_not_an_unknown_task(tmp_path):
    root = layout(tmp_path / "lay")
    (root / "tasks" / "mytask.yaml").write_text("include: ../base/_base.yaml\ntask: mytask\n  bad: [\n")
    with pytest.raises(UserError) as err:
        get_task("lm-eval:mytask", str(root))
    message = str(err.value)
    assert "\n" not in message and str(root / "tasks" / "mytask.yaml") in message and "line 3" in message


def test_a_broken_base_yaml_names_it(tmp_path):
    root = layout(tmp_path / "lay")
    (root / "base" / "_base.yaml").write_text("dataset_path: [json\n")
    with pytest.raises(UserError, match=r"_base\.yaml") as err:
        get_task("lm-eval:mytask", str(root))
    assert "\n" not in str(err.value)


def test_the_listing_warns_of_each_unreadable_yaml_and_lists_the_rest(tmp_path, capsys):
    from softeval.cli.app import main

    root = layout(tmp_path / "lay")
    layout(tmp_path / "lay2", name="other")
    (root / "tasks" / "broken.yaml").write_text("task: broken\n  x: [\n")
    assert [r["name"] for r in listing("mytask", str(root))] == ["lm-eval:mytask"]
    assert main(["tasks", "--lm-eval", "mytask", "--include-path", str(root), "--json"]) == 0
    out, err = capsys.readouterr()
    assert [r["name"] for r in json.loads(out)] == ["lm-eval:mytask"]
    assert err.count("\n") == 1 and str(root / "tasks" / "broken.yaml") in err and "skipped" in err


def test_tasks_refuses_a_missing_include_path_as_run_does(tmp_path, capsys):
    from softeval.cli.app import main

    for args in (["tasks"], ["tasks", "--lm-eval", "x"]):
        assert main([*args, "--include-path", str(tmp_path / "missing")]) == 2
        assert "no such folder" in capsys.readouterr().err
    assert main(["tasks", "--include-path", str(tmp_path)]) == 2
    assert "--lm-eval" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "allowed"), [("lm_eval.tasks.noreval.noridiom.utils.filter_dataset_nn", True),
                                               ("json.dumps", False), ("math.sqrt", False)])
def test_an_installed_module_is_found_without_importing_it_and_allowed_from_lm_evals_tasks_only(tmp_path, name,
                                                                                                allowed):
    from softeval.tasks.lmeval_bridge import function_module

    yaml_path = tmp_path / "t.yaml"
    before = set(sys.modules)
    if allowed:
        assert function_module(name, yaml_path, None).parts[-4:] == ("tasks", "noreval", "noridiom", "utils.py")
    else:
        with pytest.raises(UserError, match="lies outside lm-eval's own tasks|no module"):
            function_module(name, yaml_path, None)
    assert not {m for m in set(sys.modules) - before if "noreval" in m}  # nothing of it imported


@pytest.mark.parametrize(("edit", "said"), [
    (lambda root: _replace(root / "base" / "_base.yaml", "!function utils.fn", "!function utils.nofn"),
     "has no function 'nofn'"),
    (lambda root: _replace(root / "base" / "utils.py", "def fn", "raise RuntimeError('boom')\n\n\ndef fn"),
     "RuntimeError: boom"),
])
def test_a_helper_module_that_fails_as_lm_eval_imports_it_is_one_line(tmp_path, edit, said):
    root = layout(tmp_path / "lay")
    edit(root)
    with pytest.raises(UserError, match=f"lm-eval could not read .*mytask.yaml: .*{said}") as err:
        get_task("lm-eval:mytask", str(root)).splits("offline")
    assert "\n" not in str(err.value)


def _replace(path: Path, old: str, new: str) -> None:
    path.write_text(path.read_text().replace(old, new))
