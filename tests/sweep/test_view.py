"""The sweep's log off a terminal (softeval.sweep.view): besides a line per change, the counts at least once a
minute while jobs run (a job can run for many minutes with nothing said)."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from softeval.consoles import LOG_EVERY
from softeval.sweep.view import SweepView


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_the_counts_once_a_minute_of_silence_and_not_sooner():
    log, clock = io.StringIO(), Clock()
    states = [SimpleNamespace(state="running"), SimpleNamespace(state="queued"), SimpleNamespace(state="done")]
    view = SweepView(Console(file=log, force_terminal=False, width=200), states, clock=clock)
    with view:
        clock.now += LOG_EVERY - 1
        view.refresh()
        assert log.getvalue() == ""
        clock.now += 1
        view.refresh()
        assert log.getvalue().splitlines() == [log.getvalue().splitlines()[0]]
        assert "1 running, 1 queued, 1 done" in log.getvalue()
        view._say("done     a job")  # a change said resets the minute
        clock.now += LOG_EVERY - 1
        view.refresh()
        assert len(log.getvalue().splitlines()) == 2
        clock.now += 1
        view.refresh()
        assert len(log.getvalue().splitlines()) == 3
