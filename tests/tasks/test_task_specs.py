"""The rules a kind of task shares, each written once: a multiple-choice task answers with its letter
(``base.multiple_choice``), a short-answer one with a span matched against every alias
(``qa.short_answer``), a held-out split uses the one seed; and what ``softeval tasks`` says of a
task's other sources is the task's own (``Task.source_example``), not the command's."""

from __future__ import annotations

import json
from dataclasses import replace

from softeval.cli import app
from softeval.tasks import TASKS, base, qa
from softeval.tasks.base import (
    HELD_OUT_SEED,
    gold_target,
    lenient_letter,
    match_exact,
    multiple_choice,
    strict_letter,
)

MULTIPLE_CHOICE = ("mmlu", "arc_challenge", "arc_easy", "hellaswag", "belebele")


def test_every_multiple_choice_task_answers_with_its_letter():
    for name in MULTIPLE_CHOICE:
        task = TASKS[name]
        readers = (task.target, task.strict, task.lenient, task.match)
        assert readers == (gold_target, strict_letter, lenient_letter, match_exact)
        assert task.multiple_choice and task.stop == ("\n",) and task.max_new_tokens == 8
    assert {n for n, t in TASKS.items() if t.multiple_choice} == set(MULTIPLE_CHOICE)
    other = multiple_choice(name="x", description="", instruction="", render=str, load=None, max_new_tokens=3)
    assert other.max_new_tokens == 3 and other.strict is strict_letter


def test_short_answer_tasks_share_their_readers():
    for name, tokens in (("squad", 32), ("triviaqa", 24)):
        task = TASKS[name]
        readers = (task.target, task.strict, task.lenient, task.match)
        assert readers == (gold_target, qa.strict_first_line, qa.lenient_contains, qa.match_any)
        assert task.extra == {"f1": qa.f1_max} and task.max_new_tokens == tokens and task.stop == ("\n",)


def test_one_seed_for_every_held_out_split():
    assert HELD_OUT_SEED == 1234
    assert base.offline_held_out.__kwdefaults__["seed"] == HELD_OUT_SEED


def test_hub_gsm8k_tunes_on_train_and_scores_test(monkeypatch):
    from softeval.tasks import data

    asked = []

    def fake_hub(dataset, config, split):
        asked.append((dataset, config, split))
        return [{"question": f"{split} {i}?", "answer": f"so\n#### {i}"} for i in range(3)]

    monkeypatch.setattr(data, "read_hub", fake_hub)
    splits = TASKS["gsm8k"].load("hub")
    assert asked == [("openai/gsm8k", "main", "train"), ("openai/gsm8k", "main", "test")]
    assert [e.id for e in splits.tune] == ["train/0", "train/1", "train/2"]
    assert [e.id for e in splits.eval] == ["test/0", "test/1", "test/2"]
    named = (splits.source, splits.tune_name, splits.eval_name, splits.held_out)
    assert named == ("hub (openai/gsm8k)", "train", "test", False)


def test_softeval_tasks_shows_a_task_s_own_source_example(monkeypatch, capsys):
    assert TASKS["belebele"].source_example == "hub:fra_Latn"
    hub_only = replace(TASKS["belebele"], name="hub_only", sources=("hub",), source_example="")
    # the registry `softeval tasks` reads when it runs
    monkeypatch.setattr(app, "TASKS", {"belebele": TASKS["belebele"], "hub_only": hub_only})
    assert app.main(["tasks", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    notes = {row["name"]: row["note"] for row in rows}
    assert notes == {"belebele": "no offline source: use --source hub or file (e.g. hub:fra_Latn)",
                     "hub_only": "no offline source: use --source hub"}
    assert [row["revision"] for row in rows] == [1, 1]  # the definition's number (run identity from 2 on)
    assert [row["target_kind"] for row in rows] == ["one-line", "one-line"]  # what some tuning defaults follow
