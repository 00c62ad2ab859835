"""A built-in task's definition is numbered (``Task.revision``, part of a run's identity from 2 on, so that a
finished run of an older definition is never reused). This test holds the digest of each task's code as its
revision was recorded, and fails when the code changes unseen: a change that can change a number (prompt, target,
stops, token limit, extractors, matcher, data selection) raises the task's ``revision``; one that cannot (a
docstring, a rename) keeps it. Either way, record the digest the failure prints."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import re
import sys

from softeval.tasks import TASKS
from softeval.tasks.base import Task

# name: (revision, digest of its code and settings as that revision was recorded)
RECORDED = {
    "arc_challenge": (1, 'd3e654e86aba8daf'),
    "arc_easy": (1, 'ccacd096b6c187e6'),
    "belebele": (1, 'a00779d72efc7f51'),
    "boolq": (1, '931f205953797494'),
    "gsm8k": (4, '168c1bf4040746e1'),
    "hellaswag": (1, 'f46fe7ebd54ba417'),
    "math500": (1, 'c9918d8aa3bbcdf1'),
    "mmlu": (1, 'd909af5a718dd335'),
    "squad": (1, '2612eee946516d65'),
    "triviaqa": (1, '9827b682f739e355'),
}

CALLABLES = ("render", "target", "strict", "lenient", "match", "load", "cloze", "cloze_choices", "contexts",
             "answer_end")
SETTINGS = ("stop", "max_new_tokens", "instruction", "cue", "multiple_choice", "description")


def reached_modules(start) -> list:
    """``start`` and every module of softeval.tasks their source names (imports, lazy ones and names in strings
    included: mathnorm runs ``"softeval.tasks.mathcheck:verified"`` in a helper process), and so on."""
    seen: dict = {}
    todo = list(start)
    while todo:
        module = todo.pop()
        if module.__name__ in seen:
            continue
        seen[module.__name__] = module
        source = inspect.getsource(module)
        names = re.findall(r"softeval\.tasks\.(\w+)", source)
        names += [n.strip() for group in re.findall(r"from softeval\.tasks import ([\w, ]+)", source)
                  for n in group.split(",")]
        todo += [importlib.import_module(f"softeval.tasks.{n}") for n in names
                 if importlib.util.find_spec(f"softeval.tasks.{n}") is not None]
    return sorted(seen.values(), key=lambda m: m.__name__)


def task_modules(task: Task) -> set:
    """The modules the task's functions come from, and the one that defines it (its loader's settings, written
    there, live in a closure of base's ``source_loader``)."""
    modules = {inspect.getmodule(fn) for fn in (getattr(task, name) for name in CALLABLES) if fn is not None}
    return modules | {m for name, m in list(sys.modules.items()) if name.startswith("softeval.tasks.")
                      and any(value is task for value in vars(m).values())}


def code_digest(task: Task) -> str:
    """A sha256 over the source of the modules the task's functions come from (its own module, base's helpers),
    the modules of softeval.tasks those name (reached_modules), and its settings."""
    modules = reached_modules(task_modules(task))
    digest = hashlib.sha256()
    for module in modules:
        digest.update(module.__name__.encode() + b"\0" + inspect.getsource(module).encode() + b"\0")
    digest.update(repr([getattr(task, name) for name in SETTINGS]).encode())
    return digest.hexdigest()[:16]


def test_every_built_in_task_code_change_was_seen_and_its_revision_decided():
    now = {name: (task.revision, code_digest(task)) for name, task in sorted(TASKS.items())}
    changed = {name: now[name] for name in now if RECORDED.get(name) != now[name]}
    assert not changed, (
        "a built-in task's code changed: raise its Task.revision if a number can change, then record "
        f"these in RECORDED: {changed}")


def test_revisions_start_at_1():
    assert all(isinstance(t.revision, int) and t.revision >= 1 for t in TASKS.values())


def test_a_task_s_digest_covers_the_modules_its_functions_reach():
    from softeval.tasks import TASKS as tasks

    names = {m.__name__ for m in reached_modules(task_modules(tasks["math500"]))}
    assert {"softeval.tasks.math500", "softeval.tasks.mathnorm", "softeval.tasks.mathcheck", "softeval.tasks.base",
            "softeval.tasks.data"} <= names
    squad = {m.__name__ for m in reached_modules(task_modules(tasks["squad"]))}
    assert {"softeval.tasks.squad", "softeval.tasks.qa"} <= squad and "softeval.tasks.mathnorm" not in squad
