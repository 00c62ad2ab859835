"""The benchmarks: one declarative file per built-in task (``base`` defines a Task: render, target,
extractors, matcher, loader, the held-out rule), user task files without code (``custom``) and the
data sources (``data``: packaged copies, the hub, local files). Imports only the leaves.

``REGISTRY`` is the registry of named tasks (softeval/registry.py's shape): the built-ins by ``"module:attr"``,
each module imported when its task is asked for; what a program or a test registers; and the tasks other
distributions add through the entry-point group ``softeval.tasks`` (``ENTRY_POINTS``: the entry point's name is the
task's, its value the ``"module:attr"`` of a ``Task`` of that name; read once per process; one that does not load
is one line when chosen and breaks no other task). ``TASKS`` is a live view of it by name. ``get_task`` also
accepts ``lm-eval:NAME`` and a path to a user task file (.yaml/.yml/.json)."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from pathlib import Path

from softeval.errors import UserError, shown
from softeval.registry import Registry
from softeval.tasks.base import Example, Splits, Task
from softeval.tasks.lmeval_bridge import is_lmeval

ENTRY_POINTS = "softeval.tasks"  # the entry-point group through which another distribution adds a task
BUILT_IN = (  # in the order `softeval tasks` lists them
    ("mmlu", "softeval.tasks.mmlu:TASK"), ("gsm8k", "softeval.tasks.gsm8k:TASK"),
    ("math500", "softeval.tasks.math500:TASK"), ("triviaqa", "softeval.tasks.triviaqa:TASK"),
    ("squad", "softeval.tasks.squad:TASK"), ("arc_challenge", "softeval.tasks.arc:ARC_CHALLENGE"),
    ("arc_easy", "softeval.tasks.arc:ARC_EASY"), ("hellaswag", "softeval.tasks.hellaswag:TASK"),
    ("belebele", "softeval.tasks.belebele:TASK"), ("boolq", "softeval.tasks.boolq:TASK"),
)


def _is_task(name: str, obj: object) -> Task:
    """The registry's check: an entry names a ``Task`` of its own name, one ``lm-eval:`` does not claim."""
    if not isinstance(obj, Task) or obj.name != name:
        raise TypeError(f"it names {shown(obj)}, not a softeval.tasks.Task called {name}")
    if is_lmeval(name):
        raise ValueError(f"{name} is an lm-eval task's name: name it without 'lm-eval:'")
    return obj


REGISTRY: Registry[Task] = Registry("task", ENTRY_POINTS, BUILT_IN, check=_is_task)


class _Tasks(MutableMapping):
    """Every named task (``REGISTRY``), read when asked: a task registered later is one of them.
    Listing imports no task; ``TASKS[name]`` imports that one (a UserError where its entry point does not load);
    ``TASKS[name] = task`` registers a task in this process, ``del`` takes it back."""

    def __getitem__(self, name: str) -> Task:
        if name not in REGISTRY:
            raise KeyError(name)
        return REGISTRY.get(name)

    def __setitem__(self, name: str, task: Task) -> None:
        REGISTRY.register(name, task, replace=True)

    def __delitem__(self, name: str) -> None:
        REGISTRY.unregister(name)

    def __contains__(self, name: object) -> bool:
        return name in REGISTRY

    def __iter__(self) -> Iterator[str]:
        return iter(REGISTRY.names())

    def __len__(self) -> int:
        return len(REGISTRY.names())

    def __repr__(self) -> str:
        return f"TASKS({', '.join(REGISTRY.names())})"


TASKS = _Tasks()


def _named(name: object) -> Task | None:
    """The named task ``name`` (built in, registered or an entry point's); None for any other task (a task file,
    an lm-eval task, not a name at all)."""
    return REGISTRY.get(name) if isinstance(name, str) and not is_lmeval(name) and name in REGISTRY else None


def builtin_revision(name: object) -> int | None:
    """The revision of the named task ``name`` (``Task.revision``); None for any other task."""
    task = _named(name)
    return task.revision if task else None


def target_kind(name: object) -> str | None:
    """What the task ``name``'s targets are (``Task.target_kind``): a named task's, or what a task file says
    (``target_kind``, one-line by default); None for an lm-eval task, and for a task file that cannot be read
    (the run's checks name its problem before anything loads)."""
    task = _named(name)
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
    """A named task (built in, registered, or another distribution's entry point), ``lm-eval:NAME`` (an lm-eval
    task, found also in ``include_path``'s YAMLs) or a user task file."""
    if is_lmeval(name):
        from softeval.tasks.lmeval import lmeval_task  # lm-eval is imported only for such a task

        return lmeval_task(name, include_path)
    if name in REGISTRY:
        return REGISTRY.get(name)
    from softeval.tasks.custom import is_task_file, load_task_file  # a task file's reader: jinja2, pydantic

    if is_task_file(name):
        return load_task_file(name)  # a path that is no file: its one error (data.missing_file)
    raise UserError(f"unknown task {shown(name)}: choose one of {', '.join(REGISTRY.names())} (`softeval tasks` "
                    "lists them), a task file (.yaml/.yml/.json, see docs/guide/task-files.md), or lm-eval:NAME (an "
                    "lm-eval task)")


__all__ = ["ENTRY_POINTS", "REGISTRY", "TASKS", "Example", "Splits", "Task", "builtin_revision", "target_kind",
           "get_task"]
