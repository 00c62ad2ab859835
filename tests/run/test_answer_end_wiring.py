"""A task's complete answer (``Task.answer_end``) ends generation wherever a run generates: the scored items of
`softeval run` and the tuning curve's held-out slice (each checked against the same task without it)."""

from __future__ import annotations

import dataclasses
import json

from tiny import format_task, tiny_lm

from softeval.cli.app import main
from softeval.run import pipeline, validate
from softeval.run.prompting import Prompter
from softeval.run.tuning_loop import curve_point
from softeval.tasks import TASKS


def first_character(text: str) -> int | None:
    """Complete once two characters are written: the answer is the first (stable as the output goes on)."""
    return 1 if len(text) >= 2 else None


def anything(output: str, example) -> str | None:
    return output.strip() or None


def _outputs(tmp_path, monkeypatch, task) -> list[dict]:
    monkeypatch.setitem(TASKS, task.name, task)
    monkeypatch.setattr(pipeline, "load_model", lambda name, **kw: tiny_lm(seed=3, init_range=0.5))
    monkeypatch.setattr(validate, "check_model_name", lambda name: None)
    out = tmp_path / task.name
    assert main(["run", "--model", "tiny-0", "--task", task.name, "--out", str(out), "--limit", "8",
                 "--method", "zero-shot"]) == 0
    (samples,) = out.rglob("samples.jsonl")
    return [json.loads(line) for line in samples.read_text().splitlines()]


def test_a_run_ends_its_outputs_where_the_answer_is_complete(tmp_path, monkeypatch):
    plain = format_task(name="toyplain")
    ended = dataclasses.replace(format_task(name="toyended"), answer_end=first_character)
    free, cut = _outputs(tmp_path, monkeypatch, plain), _outputs(tmp_path, monkeypatch, ended)
    assert any(len(s["output"]) >= 2 for s in free)  # else the rule had nothing to end
    for a, b in zip(free, cut):
        assert b["output"] == (a["output"][:1] if len(a["output"]) >= 2 else a["output"])
        assert b["hit_max_new_tokens"] is (a["hit_max_new_tokens"] and len(a["output"]) < 2)


def test_the_tuning_curve_ends_its_outputs_where_the_answer_is_complete():
    lm = tiny_lm(seed=3, init_range=0.5)
    plain = dataclasses.replace(format_task(), strict=anything)  # any output follows this format
    ended = dataclasses.replace(plain, answer_end=lambda text: 0 if text else None)  # ... but an empty one
    items = plain.load().tune[:6]
    rates = [curve_point(lm, Prompter(lm, task, chat=False, shots=[]), items, None, 3)["format_rate"]
             for task in (plain, ended)]
    assert rates == [1.0, 0.0]
