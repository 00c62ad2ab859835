"""A function run in a helper process with a hard time limit: work that cannot be interrupted in the
calling process (a big-integer power inside sympy holds the interpreter in one C call, so neither a
signal handler nor a thread can stop it) is killed with its process instead.

One long-lived helper process per ``Bounded`` (started on first use, restarted after a kill), fed JSON
lines on stdin; calls are serialised by a lock, so it works from any thread (Ray worker threads
included) and needs no signal. The helper imports only the function's module.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
from importlib import import_module
from pathlib import Path


class TimeLimit(Exception):
    """The call ran past its limit; its helper process was killed."""


STARTUP_S = 120.0  # importing the function's module (sympy: ~1 s; far more on a loaded machine)


class Bounded:
    """``Bounded("pkg.module:function")(*args, limit=5.0)``: the function's JSON-able result, or
    ``TimeLimit``. Args and results must be JSON values."""

    def __init__(self, target: str):
        self.target = target
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        atexit.register(self.close)

    def __call__(self, *args, limit: float):
        with self._lock:
            proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
            proc.stdin.write(json.dumps(list(args)) + "\n")
            proc.stdin.flush()
            line = _readline(proc, limit)
            if line is None:
                self._kill()
                raise TimeLimit(f"{self.target} ran past {limit:g} s")
            reply = json.loads(line)
            if "error" in reply:
                raise RuntimeError(f"{self.target} failed in its helper process: {reply['error']}")
            return reply["ok"]

    def _start(self) -> subprocess.Popen:
        self._kill()
        self._proc = subprocess.Popen([sys.executable, "-c", _BOOT, str(Path(__file__).resolve().parents[1]),
                                       self.target], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True, bufsize=1, close_fds=True)
        if _readline(self._proc, STARTUP_S) != "ready\n":
            self._kill()
            raise RuntimeError(f"the helper process for {self.target} did not start")
        return self._proc

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass

    def close(self) -> None:
        with self._lock:
            self._kill()


# The helper's first lines. The packages above the target are installed as bare packages so that their
# __init__ files (softeval's imports torch and transformers: seconds) do not run in the helper.
_BOOT = """
import sys, types
root, target = sys.argv[1], sys.argv[2]
parts = target.split(":")[0].split(".")
packages = {"softeval"} | {".".join(parts[:depth]) for depth in range(1, len(parts))}
for name in sorted(packages):
    package = types.ModuleType(name)
    package.__path__ = [root + "/" + name.replace(".", "/")]
    sys.modules[name] = package
sys.path.insert(0, root)
import softeval.bounded as bounded_module
bounded_module.serve(target)
"""


def _readline(proc: subprocess.Popen, limit: float) -> str | None:
    """One line from the helper within ``limit`` seconds, else None (the line is written in one go)."""
    deadline = time.monotonic() + limit
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            line = proc.stdout.readline()
            return line or None


def serve(target: str) -> None:
    """The helper's loop: one JSON list of args per line in, one ``{"ok": result}`` line out."""
    module, name = target.split(":")
    function = getattr(import_module(module), name)
    out = os.fdopen(sys.stdout.fileno(), "w", buffering=1)
    out.write("ready\n")
    for line in sys.stdin:
        try:
            reply = {"ok": function(*json.loads(line))}
        except Exception as err:  # noqa: BLE001 (reported to the caller, which raises it)
            reply = {"error": f"{type(err).__name__}: {err}"}
        out.write(json.dumps(reply) + "\n")
