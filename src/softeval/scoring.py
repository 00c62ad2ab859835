"""Read a model's output back with the task's extractors and score it against the gold answer."""

from __future__ import annotations

from collections.abc import Sequence

from softeval.tasks.base import LETTERS, Example, Task


def score_output(task: Task, example: Example, output: str) -> dict:
    strict = task.strict(output, example)
    lenient = task.lenient(output, example)
    sample = {
        "id": example.id,
        "output": output,
        "strict": strict,
        "lenient": lenient,
        "gold": example.gold,
        "format_ok": strict is not None,
        "correct": bool(task.match(strict, example)),
        "lenient_correct": bool(task.match(lenient, example)),
    }
    f1 = task.extra.get("f1")
    if f1 is not None:
        sample["f1"] = float(f1(strict, example))
    return sample


def add_loglik(sample: dict, example: Example, option_scores: Sequence[float]) -> dict:
    best = max(range(len(option_scores)), key=lambda j: option_scores[j])
    sample["loglik_pred"] = LETTERS[best]
    sample["loglik_correct"] = LETTERS[best] == example.gold
    return sample
