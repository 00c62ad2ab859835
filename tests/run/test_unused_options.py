"""Options a run is given and does not use are named, once, in one line (run/validate.py: ``unused_note``; the
command line's flags record which were given: cli/options.py ``given_options``), and ``--init instruction`` on a
task without an instruction says what it starts from and records it (``init_note``, ``softprompt.init_used``)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny import format_task, tiny_lm

from softeval.cli import main
from softeval.cli.app import build_parser
from softeval.cli.options import given_options
from softeval.lm.softprompt import SoftPrompt, init_used
from softeval.run import pipeline
from softeval.run.config import COMMON, OPTIONS, SWEEP_FILE, TUNING, RunConfig
from softeval.run.validate import init_note, unused_note

ZERO_SHOT_NOTE = ("note: --lora-rank, --lora-targets, --permutations have no effect on this run (--lora-rank, "
                  "--lora-targets: not read by method zero-shot; --permutations: task toyformat is not multiple "
                  "choice)")


def _notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if "no effect" in line or "has no instruction" in line]


def test_a_zero_shot_run_names_the_options_it_does_not_use_once(toy, tmp_path, monkeypatch, capsys):
    """Issue 60, 10: `--lora-rank 4 --lora-targets q_proj --permutations 3` on a zero-shot run of a task that is
    not multiple choice (SQuAD there) said nothing."""
    monkeypatch.setattr(pipeline, "load_lm", lambda config: tiny_lm())
    assert main(["run", "--model", "org/tiny", "--task", "toyformat", "--method", "zero-shot", "--limit", "2",
                 "--lora-rank", "4", "--lora-targets", "q_proj", "--permutations", "3", "--out", str(tmp_path)]) == 0
    assert _notes(capsys.readouterr().err) == [ZERO_SHOT_NOTE]


def test_a_run_that_uses_every_option_it_is_given_names_none(toymc, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pipeline, "load_lm", lambda config: tiny_lm())
    assert main(["run", "--model", "org/tiny", "--task", toymc.name, "--method", "zero-shot", "--limit", "2",
                 "--permutations", "1", "--eval-batch-size", "4", "--out", str(tmp_path)]) == 0
    assert _notes(capsys.readouterr().err) == []


def test_the_rule_reads_the_method_registry_and_the_task_kind():
    cfg = RunConfig(model="m", task="squad", methods=("zero-shot", "soft-prompt"))
    assert unused_note(cfg, {"steps", "lr", "lora_rank", "model", "task"}, False) == (
        "note: --lora-rank has no effect on this run (--lora-rank: not read by methods zero-shot, soft-prompt)")
    assert unused_note(cfg, {"permutations"}, True) is None  # multiple choice: every method reads it
    assert unused_note(cfg, {"permutations", "shots"}, False, SWEEP_FILE) == (
        "note: 'shots', 'permutations' have no effect on this run ('shots': not read by methods zero-shot, "
        "soft-prompt; 'permutations': task squad is not multiple choice)")
    assert unused_note(cfg, set(), False) is None
    assert unused_note(RunConfig(model="m", task="t", methods=("few-shot",)), {"shots", "seed"}, False) is None


def test_only_the_flags_given_are_recorded_a_default_value_given_too():
    parser = build_parser()
    args = parser.parse_args(["run", "--model", "m", "--task", "t", "--lora-rank", "8", "--no-early-stop",
                              "--engine-arg", "a=1", "--force"])
    assert given_options(args) == {"model", "task", "lora_rank", "early_stop", "engine_args", "force"}
    assert args.lora_rank == 8 and args.early_stop is False and args.engine_args == {"a": 1}
    assert given_options(parser.parse_args(["run", "--model", "m", "--task", "t"])) == {"model", "task"}


RUN_ROWS = [key for key, row in OPTIONS.items() if row.where in (COMMON, TUNING) and not row.required]


def _flag(key: str) -> list[str]:
    """The flag of option ``key`` given with a value it accepts (its default where it has one)."""
    row = OPTIONS[key]
    if row.type is bool:
        return [row.flag]  # --force, or --early-stop given as it is
    if row.type is dict:
        return [row.flag, "a=1"]
    if row.choices is not None:
        return [row.flag, str(next(iter(row.choices)))]
    if row.default is None:
        return [row.flag, "none" if row.nullable and row.type in (int, float) else "x"]
    return [row.flag, str(row.default)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(RUN_ROWS), unique=True))
def test_the_options_recorded_are_those_given_whatever_their_values(keys):
    argv = ["run", "--model", "m", "--task", "t"] + [part for key in keys for part in _flag(key)]
    assert given_options(build_parser().parse_args(argv)) == {"model", "task", *keys}


@pytest.fixture
def no_instruction(monkeypatch):
    """The toy format task without an instruction, registered for one test."""
    from softeval import tasks

    task = dataclasses.replace(format_task(), instruction="")
    monkeypatch.setitem(tasks.TASKS, task.name, task)
    return task


def test_init_instruction_without_an_instruction_says_so_once_and_records_vocab(no_instruction, tmp_path,
                                                                                 monkeypatch, capsys):
    """Issue 60, 10: `--init instruction` on a task without an instruction tuned from vocab tokens without a word,
    and results.json said "instruction"."""
    monkeypatch.setattr(pipeline, "load_lm", lambda config: tiny_lm())
    assert main(["run", "--model", "org/tiny", "--task", "toyformat", "--method", "soft-prompt", "--limit", "2",
                 "--steps", "1", "--tokens", "2", "--curve-items", "0", "--init", "instruction",
                 "--out", str(tmp_path)]) == 0
    assert _notes(capsys.readouterr().err) == [
        "note: --init instruction: task toyformat has no instruction, so the soft prompt starts from vocab "
        "(results.json's tuning.init says vocab)"]
    results = json.loads(next(tmp_path.rglob("results.json")).read_text())
    assert results["tuning"]["init"] == "vocab" and results["config"]["init"] == "instruction"
    saved = json.loads(next(tmp_path.rglob("softeval.json")).read_text())
    assert saved["init"] == "vocab"


def test_init_instruction_starts_where_vocab_does_and_is_said_only_where_it_is_tuned():
    lm = tiny_lm()
    fallen = SoftPrompt.initialise(lm, 3, "instruction", seed=5, instruction="  ")
    assert torch.equal(fallen.weight, SoftPrompt.initialise(lm, 3, "vocab", seed=5).weight) and fallen.init == "vocab"
    assert SoftPrompt.initialise(lm, 3, "instruction", instruction="Answer.").init == "instruction"
    assert init_used("instruction", None) == "vocab" and init_used("instruction", "Say it.") == "instruction"
    assert init_used("random", "") == "random"
    tuned = RunConfig(model="m", task="t", methods=("soft-prompt",), init="instruction")
    assert init_note(tuned, "") is not None and init_note(tuned, "Say it.") is None
    assert init_note(dataclasses.replace(tuned, methods=("zero-shot", "lora")), "") is None
    assert init_note(dataclasses.replace(tuned, init="vocab"), "") is None
