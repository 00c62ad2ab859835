"""`softeval` in a child process, on the tiny model and the toy format task, with one fault hook.

    python runchild.py HOOK softeval-args...

HOOK is ``none`` or ``<point>:<n>:<action>``: at the n-th time the run reaches ``point``, do
``action``. Points: ``tune`` (a tuning step's loss), ``score`` (a scoring chunk's generation),
``finish`` (results.json about to be written, samples already written), ``index`` (a finishing run's
folder renamed into place, the index not yet told). Actions: ``kill`` (SIGKILL itself: a `kill -9` at exactly
that moment) or ``pause=FILE`` (print PAUSED, then wait until FILE exists).
Used by the lock test (two processes, one run) and the fault-injection test.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402
from tiny import format_task, tiny_lm  # noqa: E402

from softeval import (
    cli,
    tasks,  # noqa: E402
)
from softeval.lm import generation, tuning_loss
from softeval.run import pipeline, validate
from softeval.store import index, runs

torch.set_num_threads(1)
# A shell without job control starts background jobs with SIGINT ignored, and Python then never raises
# KeyboardInterrupt: the signal tests would hang where CI runs that way. Ctrl-C as in a terminal.
signal.signal(signal.SIGINT, signal.default_int_handler)
SAVE_EVERY = 4  # scoring chunk: small, so a run has several chunks to be killed between


def act(action: str) -> None:
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action.startswith("pause="):
        print("PAUSED", flush=True)
        while not Path(action[len("pause="):]).exists():
            time.sleep(0.05)


class Hook:
    """Counts the calls that reach the hook's point and does ``action`` at the ``n``-th."""

    def __init__(self, n: int, action: str) -> None:
        self.n, self.action, self.count, self.inside = n, action, 0, False

    def reached(self) -> None:
        self.count += 1
        if self.count == self.n:
            act(self.action)

    def wrap(self, owner, name, when=lambda *a, **k: True) -> None:
        """A call of ``owner.name`` for which ``when`` holds reaches the point."""
        real = getattr(owner, name)

        def hooked(*args, **kw):
            if when(*args, **kw):
                self.reached()
            return real(*args, **kw)

        setattr(owner, name, hooked)

    def flag(self, owner, name) -> None:
        """While ``owner.name`` runs, ``inside`` is true: count only the calls made from it."""
        real = getattr(owner, name)

        def flagged(*args, **kw):
            self.inside = True
            try:
                return real(*args, **kw)
            finally:
                self.inside = False

        setattr(owner, name, flagged)


def _at_score(hook: Hook) -> None:
    hook.flag(pipeline, "score_items")
    hook.wrap(generation, "generate", when=lambda *a, **k: hook.inside)


def _at_index(hook: Hook) -> None:  # only the index call of a run that is finishing, not of one found finished
    hook.flag(runs.RunFolder, "finish")
    hook.wrap(index, "record_run", when=lambda *a, **k: hook.inside)


POINTS = {
    "tune": lambda hook: hook.wrap(tuning_loss, "target_loss_backward"),
    "score": _at_score,
    "finish": lambda hook: hook.wrap(runs, "write_json", when=lambda path, data: Path(path).name == "results.json"),
    "index": _at_index,
}


def install(hook: str) -> None:
    if hook == "none":
        return
    point, n, action = hook.split(":", 2)
    counter = Hook(int(n), action)
    if point not in POINTS:
        raise SystemExit(f"unknown hook point {point!r}")
    POINTS[point](counter)


def main() -> int:
    hook, argv = sys.argv[1], sys.argv[2:]
    task = format_task()
    tasks.TASKS[task.name] = task
    pipeline.load_model = lambda name, **kw: tiny_lm()
    validate.check_model_name = lambda name: None  # 'tiny-0' is no preset, folder or hub id
    pipeline.SAVE_EVERY = SAVE_EVERY
    install(hook)
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
