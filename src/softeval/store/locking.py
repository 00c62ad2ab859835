"""One writer per run: an OS file lock (``fcntl.flock``) with the holder's pid, host and start time.

The kernel releases a flock when its holder dies (``kill -9`` included), so a lock left by a killed
process is free for the next one: the lock file it leaves behind is only stale *information*, which
the next holder overwrites (and reports). The lock file is removed on release; because another
process may have opened it just before, a process that gets the lock checks that the path still
names the file it locked, and tries again if not (the usual unlink-race guard).

flock is advisory and local: on a network filesystem it holds only where the filesystem supports it
(NFSv4 and most cluster filesystems do; docs/reference/run-format.md says so).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from softeval.errors import UserError


class Locked(UserError):
    """Another live process holds the lock; ``holder`` is what it wrote about itself (may be empty)."""

    def __init__(self, message: str, holder: dict):
        super().__init__(message)
        self.holder = holder


def read_holder(path: Path) -> dict:
    """The pid/host/since a holder wrote into the lock file ({} when unreadable or not written yet)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def describe(holder: dict) -> str:
    if not holder:
        return "another process (it has not written its details yet)"
    return f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('since')}"


@contextmanager
def file_lock(path: Path, what: str, wait: bool = False,
              on_wait: Callable[[dict], None] | None = None,
              on_stale: Callable[[dict], None] | None = None) -> Iterator[dict]:
    """Hold an exclusive lock on ``path`` (created if needed) for the ``with`` block.

    Held by another live process: raise ``Locked`` naming it (``what`` says what is locked), or with
    ``wait`` call ``on_wait(holder)`` once and block until it is free. ``on_stale(info)`` is called
    when the file held the details of a process that no longer holds the lock (it died). Yields the
    details this process wrote: {"pid", "host", "since"}.
    """
    path = Path(path)
    waited = False
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:  # a process letting go of another lock there removed the empty folder
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = read_holder(path)
            if not wait:
                os.close(fd)
                raise Locked(f"{what} is being written by {describe(holder)}: wait for it to finish "
                             "(--wait), or write elsewhere (--out)", holder) from None
            if not waited and on_wait:
                on_wait(holder)
            waited = True
            fcntl.flock(fd, fcntl.LOCK_EX)
        if _same_file(fd, path):
            break
        os.close(fd)  # the previous holder removed the file after we opened it: lock the new one
    try:
        stale = read_holder(path)
        if stale and on_stale and not waited:
            on_stale(stale)
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "since": datetime.now(UTC).isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        yield me
    finally:
        try:
            if _same_file(fd, path):
                path.unlink()
        finally:
            os.close(fd)  # closing releases the lock


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)
