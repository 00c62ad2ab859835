"""A built-in task's definition is numbered (``Task.revision``, part of a run's identity from 2 on, so that a
finished run of an older definition is never reused). This test holds the digest of each task's code as its
revision was recorded, and fails when the code changes unseen: a change that can change a number (prompt, target,
stops, token limit, extractors, matcher, data selection) raises the task's ``revision``; one that cannot (a
docstring, a rename) keeps it. Either way, record the digest the failure prints."""

from __future__ import annotations

import hashlib
import inspect

from softeval.tasks import TASKS
from softeval.tasks.base import Task

# name: (revision, digest of its code and settings as that revision was recorded)
RECORDED = {
    "arc_challenge": (1, 'e4414c81a1a7e64b'),
    "arc_easy": (1, '05377cb28f8791f9'),
    "belebele": (1, '5a70d660d6ae8cc2'),
    "boolq": (1, '8f490f2e1a9ee954'),
    "gsm8k": (2, 'efd63c88bb177144'),
    "hellaswag": (1, '6af5fad216b3489b'),
    "math500": (1, '8e087d88ee97952f'),
    "mmlu": (1, '513874e07b30dff3'),
    "squad": (1, '96cf1f0da76e7721'),
    "triviaqa": (1, '213c4e2a7d6b0ceb'),
}

CALLABLES = ("render", "target", "strict", "lenient", "match", "load", "cloze", "cloze_choices", "contexts")
SETTINGS = ("stop", "max_new_tokens", "instruction", "cue", "multiple_choice", "description")


def code_digest(task: Task) -> str:
    """A sha256 over the source of the modules the task's functions come from (its own module, base's helpers)
    and its settings."""
    modules = {inspect.getmodule(fn) for fn in (getattr(task, name) for name in CALLABLES) if fn is not None}
    digest = hashlib.sha256()
    for module in sorted(modules, key=lambda m: m.__name__):
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
