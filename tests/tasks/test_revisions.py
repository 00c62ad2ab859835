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
    "arc_challenge": (1, 'a92f5cae7440072f'),
    "arc_easy": (1, 'fe373fe22e264991'),
    "belebele": (1, '5ab7baac208eac75'),
    "boolq": (1, 'cc6b55f685bb9445'),
    "gsm8k": (2, 'f512bd6f0d5e1f11'),
    "hellaswag": (1, '473ff9bcf312f28d'),
    "math500": (1, '944dd36e7efaea34'),
    "mmlu": (1, '6b2efc5d0f61f9ae'),
    "squad": (1, 'a7dffd7d8b9d67af'),
    "triviaqa": (1, '63d8633eb27fd094'),
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
