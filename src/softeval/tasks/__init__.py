"""Registry of built-in tasks; ``get_task`` also accepts a path to a user task file."""

from __future__ import annotations

from softeval.errors import UserError
from softeval.tasks import gsm8k, mmlu
from softeval.tasks.base import Example, Splits, Task

TASKS: dict[str, Task] = {t.name: t for t in (mmlu.TASK, gsm8k.TASK)}


def get_task(name: str) -> Task:
    if name in TASKS:
        return TASKS[name]
    raise UserError(f"unknown task {name!r}: choose one of {', '.join(sorted(TASKS))} (`softeval tasks` lists them)")


__all__ = ["TASKS", "Example", "Splits", "Task", "get_task"]
