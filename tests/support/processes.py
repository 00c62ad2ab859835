"""Child processes running a softeval command through tests/support/runchild.py (with a hook that
kills, stops or holds it at a named point), and reading their output line by line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

CHILD = Path(__file__).with_name("runchild.py")
ARGS = ["run", "--model", "tiny-0", "--task", "toyformat", "--method", "soft-prompt", "--limit", "6",
        "--steps", "4", "--shots", "1", "--tokens", "2", "--lr", "0.1", "--curve-every", "2",
        "--curve-items", "4", "--eval-batch-size", "3"]


def child(hook: str, out: Path, *extra: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "COLUMNS": "500", "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(CHILD), hook, *ARGS, "--out", str(out), *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def wait_for_line(stream, text: str, timeout: float = 120) -> list[str]:
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError(f"{text!r} never printed; got {''.join(seen)!r}")
