"""A synthetic multiple-choice task (``toymc``, registered by the fixture of that name in conftest.py)
and runs of the tiny model on it, for the cloze, permutation and format-failure tests."""

from __future__ import annotations

import json
from pathlib import Path

from softeval.run.config import RunConfig
from softeval.tasks.base import (
    LETTERS,
    Example,
    Splits,
    Task,
    cloze_question,
    lenient_letter,
    match_exact,
    render_mc,
    strict_letter,
)

COLOURS = ["red", "blue", "green", "violet", "amber", "teal", "indigo", "ochre", "mauve", "cyan", "olive",
           "navy"]


def mc_task(n_tune: int = 8, n_eval: int = 6, name: str = "toymc") -> Task:
    """Colour questions with 4 options of different lengths; the answer is the first option whose
    name has the question's length (so there is content to follow)."""
    def make(i: int, split: str) -> Example:
        options = tuple(COLOURS[(i + k) % len(COLOURS)] for k in range(4))
        gold = LETTERS[i % 4]
        return Example(id=f"{split}/{i}", fields={"question": f"Which colour is number {i}?",
                                                  "answer": options[i % 4]}, gold=gold, options=options)

    tune, test = [make(i, "tune") for i in range(n_tune)], [make(i, "test") for i in range(n_eval)]
    return Task(name=name, description="toy multiple choice", instruction="Answer with the letter.",
                render=lambda e: render_mc(e.fields["question"], e.options), target=lambda e: " " + e.gold,
                strict=strict_letter, lenient=lenient_letter, match=match_exact,
                load=lambda source="offline", **kw: Splits(list(tune), list(test), "synthetic", "tune",
                                                           "test"),
                stop=("\n",), max_new_tokens=4, multiple_choice=True,
                cloze=lambda e: cloze_question(e.fields["question"]))


def mc_config(out: Path, **kw) -> RunConfig:
    """A zero-shot run of the tiny model on ``toymc`` into ``out``; keyword arguments override any field."""
    base = dict(model="tiny-0", task="toymc", methods=("zero-shot",), limit=6, eval_batch_size=4, steps=2,
                tokens=2, batch_size=2, curve_items=0, shots=2, out=str(out), device="cpu")
    return RunConfig(**{**base, **kw})


def read_samples(out: Path, method: str = "zero-shot") -> list[dict]:
    """The samples.jsonl rows of the ``method`` run under ``out``."""
    path = next(out.rglob(f"{method}/seed0/samples.jsonl"))
    return [json.loads(line) for line in path.read_text().splitlines()]
