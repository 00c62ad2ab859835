"""User-defined tasks from a YAML/JSON file: end to end on a tiny random model, and every kind of bad
file is an error naming the file and the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from softeval.cli import app
from softeval.errors import UserError
from softeval.run.config import RunConfig
from softeval.run.pipeline import run_job
from softeval.tasks import get_task
from softeval.tasks.custom import load_task_file

torch.set_num_threads(1)
EXAMPLE = Path(__file__).parents[2] / "examples" / "capitals" / "capitals.yaml"

MC_ROWS = [{"q": f"Which number is {n}?", "opts": [str(n), str(n + 1), str(n + 2)], "ans": i % 3,
            "right": str(n + i % 3)} for i, n in enumerate(range(10, 40))]


def write_task(folder: Path, spec: dict, rows=MC_ROWS, name="task.yaml", data="rows.jsonl") -> Path:
    (folder / data).write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = folder / name
    path.write_text(json.dumps(spec) if name.endswith(".json") else _yaml(spec))
    return path


def _yaml(spec: dict) -> str:
    import yaml

    return yaml.safe_dump(spec, sort_keys=False)


MC_SPEC = {"data": "rows.jsonl", "fields": ["q"], "answer_field": "ans", "options_field": "opts",
           "prompt": "Question: {{ q }}\n{{ options_block }}\nAnswer:", "split": {"fraction": 0.5, "seed": 7},
           "max_new_tokens": 4}


def test_shipped_example_runs_end_to_end_on_a_tiny_model(tmp_path):
    from tiny import tiny_lm

    config = RunConfig(model="tiny-0", task=str(EXAMPLE), methods=("zero-shot", "soft-prompt"), limit=4, steps=2,
                       tokens=2, batch_size=2, eval_batch_size=4, curve_items=0, out=str(tmp_path), device="cpu")
    results = run_job(config, lm=tiny_lm())
    assert [r["method"] for r in results] == ["zero-shot", "soft-prompt"]
    for r in results:
        assert r["n"] == 4 and r["task"] == str(EXAMPLE)
        assert {"accuracy", "format_rate", "lenient_accuracy", "f1"} <= set(r["metrics"])
        assert r["split"]["held_out"] and r["split"]["n_tune"] == 10 and r["split"]["seed"] == 1234
    saved = list(tmp_path.rglob("results.json"))
    assert len(saved) == 2
    samples = (saved[0].parent / "samples.jsonl").read_text().splitlines()
    assert json.loads(samples[0])["prompt"].startswith("Answer with the name of the city only.\n\nQuestion: What")


def test_multiple_choice_task_file_gets_letter_and_cloze_scores(tmp_path):
    from tiny import tiny_lm

    path = write_task(tmp_path, MC_SPEC, name="mc.json")
    config = RunConfig(model="tiny-0", task=str(path), methods=("zero-shot",), limit=5, eval_batch_size=5,
                       out=str(tmp_path / "runs"), device="cpu")
    (result,) = run_job(config, lm=tiny_lm())
    assert {"letter_loglik_accuracy", "cloze_accuracy", "cloze_accuracy_norm"} <= set(result["metrics"])
    assert result["split"]["n_tune"] == 15


def test_multiple_choice_scores_survive_an_interrupted_run(tmp_path, monkeypatch):
    from interrupts import interrupt_second_generate
    from tiny import tiny_lm

    from softeval.run import pipeline

    path = write_task(tmp_path, MC_SPEC, name="mc.json")
    config = lambda out: RunConfig(model="tiny-0", task=str(path), methods=("zero-shot",), limit=5,
                                   eval_batch_size=5, out=str(tmp_path / out), device="cpu")
    (full,) = run_job(config("full"), lm=tiny_lm())
    monkeypatch.setattr(pipeline, "SAVE_EVERY", 2)
    interrupt_second_generate(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        run_job(config("resumed"), lm=tiny_lm())
    (resumed,) = run_job(config("resumed"), lm=tiny_lm())
    assert resumed["metrics"] == full["metrics"] and "cloze_accuracy" in resumed["metrics"]


def test_multiple_choice_answers_by_letter_text_or_index(tmp_path):
    rows = [{"q": "?", "opts": ["x", "yy", "z"], "ans": a} for a in ("B", "yy", 1, "1")]
    task = load_task_file(write_task(tmp_path, {**MC_SPEC, "split": {"n_tune": 1}}, rows))
    splits = task.load()
    assert {e.gold for e in splits.tune + splits.eval} == {"B"}
    example = splits.eval[0]
    assert task.render(example) == "Question: ?\nA. x\nB. yy\nC. z\nAnswer:"
    assert task.target(example) == " B"
    assert task.strict(" B", example) == "B" and task.lenient("it is yy", example) == "B"


def test_tune_file_rule_and_relative_paths(tmp_path):
    (tmp_path / "sub").mkdir()
    write_task(tmp_path / "sub", {}, MC_ROWS[:8], name="unused.yaml", data="tune.jsonl")
    spec = {**MC_SPEC, "tune_data": "sub/tune.jsonl"}
    spec.pop("split")
    task = get_task(str(write_task(tmp_path, spec)))
    splits = task.load()
    assert (len(splits.tune), len(splits.eval), splits.held_out) == (8, 30, False)
    assert "tune.jsonl" in splits.tune_name


def test_numeric_matcher_and_regexes(tmp_path):
    rows = [{"question": f"{a}+{a}?", "answer": f"{2 * a:,}"} for a in range(500, 520)]
    spec = {"data": "rows.jsonl", "answer_field": "answer", "prompt": "{{ question }} =", "matcher": "numeric",
            "answer_regex": r"(?m)^Result: (\S+)$", "target": " ...\nResult: {{ gold }}", "stop": "\n\n"}
    task = load_task_file(write_task(tmp_path, spec, rows))
    example = task.load().eval[0]
    gold = example.gold
    assert "," not in gold
    assert task.match(task.strict(f"work\nResult: {int(gold):,}", example), example)
    assert task.strict(f"Result {gold}", example) is None
    assert task.lenient(f"so it is {gold} in the end", example) == gold  # default lenient: the last number
    assert task.stop == ("\n\n",) and task.match(task.strict(task.target(example), example), example)
    assert task.target_kind == "one-line"  # unless the file says otherwise
    assert load_task_file(write_task(tmp_path, {**spec, "target_kind": "worked-solution"}, rows)).target_kind \
        == "worked-solution"


def test_a_regex_that_backtracks_for_ever_makes_the_item_unscorable_not_a_stall(tmp_path, monkeypatch):
    """A task file's answer_regex with polynomial backtracking (here ~n^12 on a long output) is cut
    at REGEX_SECONDS: the item is unscorable and not correct, the run goes on."""
    import time

    from softeval.run.scoring import score_output
    from softeval.tasks import custom

    monkeypatch.setattr(custom, "REGEX_SECONDS", 0.05)
    rows = [{"question": f"{a}?", "answer": str(a)} for a in range(10)]
    spec = {"data": "rows.jsonl", "answer_field": "answer", "prompt": "{{ question }}",
            "answer_regex": r"(.*,){12}P", "lenient_regex": r"(.*,){12}Q", "target": "," * 12 + "P"}
    task = load_task_file(write_task(tmp_path, spec, rows))
    example = task.load().eval[0]
    t0 = time.perf_counter()
    sample = score_output(task, example, "a," * 200)
    assert time.perf_counter() - t0 < 5  # Python's re needs hours for this search
    assert sample["unscorable"] and sample["strict"] is None and sample["lenient"] is None
    assert not sample["correct"] and not sample["format_ok"]
    ok = score_output(task, example, "," * 12 + "P")  # the same regexes on an output they match at once
    assert ok["format_ok"] and "unscorable" not in ok


def test_templates_are_sandboxed(tmp_path):
    spec = {**MC_SPEC, "prompt": "{{ cycler.__init__.__globals__.os.popen('echo pwned').read() }}"}
    with pytest.raises(UserError, match="prompt template cannot be filled"):
        load_task_file(write_task(tmp_path, spec)).load()
    spec = {**MC_SPEC, "prompt": "{{ q.__class__.__mro__ }}"}
    with pytest.raises(UserError, match="task.yaml|rows.jsonl"):
        load_task_file(write_task(tmp_path, spec)).load()


@pytest.mark.parametrize(("change", "message"), [
    ({"colour": "red"}, "unknown setting.*colour"),
    ({"prompt": None}, "lacks the required setting.*prompt"),
    ({"prompt": "{% if %}"}, "prompt is not a valid template"),
    ({"answer_regex": "(["}, "answer_regex is not a valid regular expression"),
    ({"matcher": "fuzzy"}, "matcher 'fuzzy' is not one of"),
    ({"options_field": None}, "answer_regex is required"),
    ({"split": {"n_tune": 30}}, "cannot hold out 30 tuning items from 30"),
    ({"split": {"fraction": 2}}, "fraction must be between 0 and 1"),
    ({"split": {"size": 2}}, "split must be a mapping"),
    ({"data": "missing.jsonl"}, "data file not found"),
    ({"prompt": "{{ nothere }}"}, r"rows\.jsonl: row 0: the prompt template cannot be filled.*nothere"),
    ({"fields": ["q", "extra"]}, r"rows\.jsonl: row 0 lacks field\(s\) extra"),
    ({"target_kind": "essay"}, "target_kind must be one-line or worked-solution, not str 'essay'"),
    ({"split": {"fraction": 0.5, "n_tune": 3}}, "split: give n_tune or fraction, not both"),
    ({"options_field": ["opts"]}, r"options_field must be a field name or a list of field names, not list \['opts'\]"),
    ({"matcher": "numeric"}, r"a multiple-choice task \(options_field\) is matched by letter"),
])
def test_bad_task_files_name_file_and_problem(tmp_path, change, message):
    spec = {k: v for k, v in {**MC_SPEC, **change}.items() if v is not None}
    path = write_task(tmp_path, spec)
    with pytest.raises(UserError, match=message) as err:
        load_task_file(path).load()
    assert "task.yaml" in str(err.value) or "rows.jsonl" in str(err.value) or "missing.jsonl" in str(err.value)


def test_not_a_mapping_and_not_yaml(tmp_path):
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(UserError, match="list.yaml: must be a mapping"):
        get_task(str(tmp_path / "list.yaml"))
    (tmp_path / "broken.yaml").write_text("data: [\n")
    with pytest.raises(UserError, match="broken.yaml: not valid YAML"):
        get_task(str(tmp_path / "broken.yaml"))
    with pytest.raises(UserError, match="task file not found"):
        get_task(str(tmp_path / "nope.yaml"))


def test_bad_rows_error_or_counted_skip(tmp_path):
    rows = [dict(r) for r in MC_ROWS]
    rows[3]["ans"] = 7  # outside its 3 options
    del rows[5]["q"]
    path = write_task(tmp_path, MC_SPEC, rows)
    with pytest.raises(UserError, match=r"rows\.jsonl: row 3 has answer 7 outside its 3 options"):
        load_task_file(path).load()
    splits = load_task_file(path).load(skip_bad_rows=True)
    assert splits.skipped_rows == 2 and len(splits.tune) + len(splits.eval) == 28


def test_cli_flag_reaches_the_run_config():
    args = app.build_parser().parse_args(["run", "--model", "m", "--task", "t.yaml", "--skip-bad-rows"])
    assert app._config(args, ("zero-shot",)).skip_bad_rows is True
    args = app.build_parser().parse_args(["run", "--model", "m", "--task", "t.yaml"])
    assert app._config(args, ("zero-shot",)).skip_bad_rows is False


def test_custom_multiple_choice_matches_every_letter(tmp_path):
    """Letters went through the short-answer matcher, whose SQuAD normalisation
    deletes the article 'a', so gold 'A' never matched. Every letter of a 26-option task must."""
    from softeval.run.scoring import score_output
    from softeval.tasks.base import LETTERS

    rows = [{"q": f"q{i}", "opts": [f"option {k}" for k in range(26)], "ans": LETTERS[i]} for i in range(26)]
    (tmp_path / "tune.jsonl").write_text(json.dumps({**rows[0], "q": "tuning"}) + "\n")
    spec = {**{k: v for k, v in MC_SPEC.items() if k != "split"}, "tune_data": "tune.jsonl"}
    task = load_task_file(write_task(tmp_path, spec, rows=rows))
    examples = task.load().eval
    assert {e.gold for e in examples} == set(LETTERS)
    for example in examples:
        sample = score_output(task, example, f"{example.gold}. option")
        assert sample["strict"] == example.gold and sample["correct"] and sample["lenient_correct"], example.gold
        wrong = LETTERS[(LETTERS.index(example.gold) + 1) % 26]
        assert not score_output(task, example, f"{wrong}.")["correct"]


def test_test_items_leak_into_tuning_and_shots(tmp_path):
    """A tuning item (tune_data here) whose rendered question equals a scored item's is
    dropped before tuning and shot picking, and counted in results.json split."""
    from tiny import tiny_lm

    rows = MC_ROWS[:10]
    tune_rows = MC_ROWS[10:30] + [dict(MC_ROWS[3]), {**MC_ROWS[5], "q": "  Which number is 15? "}]
    (tmp_path / "tune.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tune_rows))
    spec = {**{k: v for k, v in MC_SPEC.items() if k != "split"}, "tune_data": "tune.jsonl"}
    task = load_task_file(write_task(tmp_path, spec, rows=rows))
    splits = task.splits("offline")
    assert splits.dropped_test_duplicates == 2 and len(splits.tune) == 20
    scored = {task.render(e) for e in splits.eval}
    assert not [e for e in splits.tune if task.render(e) in scored]
    config = RunConfig(model="tiny-0", task=str(task.extra["task_file"]), methods=("few-shot",),
                       limit=3, shots=20, curve_items=0,
                       eval_batch_size=3, out=str(tmp_path / "runs"), device="cpu")
    (result,) = run_job(config, lm=tiny_lm())
    assert result["split"]["dropped_test_duplicates"] == 2 and result["split"]["n_tune"] == 20
