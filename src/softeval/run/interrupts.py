"""Interrupts during tuning (run/tuning_loop.py): a Ctrl-C or SIGTERM during a step's update lets the step finish, so
the checkpoint keeps it; a second one, or one while a curve point is scored, stops at once."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

HELD = ("\nstopping once this tuning step is done, to keep it for the next run (interrupt again to stop at once, "
        "losing the step)\n")


class HeldInterrupts:
    """SIGINT and SIGTERM during tuning. Inside ``holding()`` (a step's update: seconds to a minute on a worked
    solution) the first one is held, said once on stderr, and raised by ``raise_held`` once the step is whole; a
    second one, or one outside ``holding()`` (a curve point's scoring: minutes), is raised where it lands, by the
    handler there was before (KeyboardInterrupt; the command line's SIGTERM, softeval.cli.app). Only a handler of
    Python's own is taken over, and only in the main thread (elsewhere no handler can be set): otherwise nothing
    changes. The handlers before are put back on exit."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.before: dict[int, Callable] = {}
        self.held: int | None = None  # the signal held until the step is whole
        self.inside = False

    def __enter__(self) -> HeldInterrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                handler = signal.getsignal(sig)
                if callable(handler):
                    self.before[sig] = handler
                    signal.signal(sig, self._caught)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self.before.items():
            signal.signal(sig, handler)

    def _caught(self, signum, frame) -> None:
        if self.inside and self.held is None:
            self.held = signum
            os.write(2, HELD.encode())  # a signal handler: no print, which may be writing already
            return
        self.before[signum](signum, frame)

    @contextmanager
    def holding(self) -> Iterator[None]:
        self.inside = True
        try:
            yield
        finally:
            self.inside = False

    def raise_held(self) -> None:
        """Raise the held signal, as its handler before would have (nothing when none is held)."""
        if self.held is not None:
            signum, self.held = self.held, None
            self.before[signum](signum, None)
