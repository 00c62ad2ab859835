"""The console tables are printed to, and the progress bar a job's long steps draw."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

PIPE_WIDTH = 400  # a log file or pipe has no width to fit: tables are never cut or squeezed there
LOG_WIDTH = 160  # a message console's width off a terminal where COLUMNS does not say one (rich would take 80)
LOG_EVERY = 60.0  # off a terminal, a progress line at least this often (seconds) while a bar's work goes on


def log_width() -> int:
    """Off a terminal: COLUMNS where it is set to a width, else LOG_WIDTH (rich's own default, 80, squeezed a
    table's every cell over several lines in a log)."""
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else LOG_WIDTH


def table_console(stderr: bool = False) -> Console:
    """A console that prints whole tables: the terminal's width on a terminal, wide enough for any
    of softeval's tables when the output goes to a file or a pipe (rich would assume 80 columns and
    cut the last columns off)."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=PIPE_WIDTH)


def message_console() -> Console:
    """The console a command's messages go to (stderr): as rich draws them on a terminal; in a log file or a
    pipe each message is one line, never wrapped mid-sentence, and a table (a sweep's jobs) is as wide as
    ``log_width`` says, not rich's assumed 80 columns."""
    console = Console(stderr=True)
    return console if console.is_terminal else Console(stderr=True, soft_wrap=True, width=log_width())


class LogLines:
    """Off a terminal a bar draws nothing until it ends: a log said nothing for 20 minutes of tuning. ``due``
    gives a line per unfinished task of ``progress`` once ``every`` seconds of ``clock`` have passed since the
    last lines (or the start), and none before."""

    def __init__(self, progress: Progress, every: float = LOG_EVERY, clock: Callable[[], float] = time.monotonic):
        self.progress, self.every, self.clock = progress, every, clock
        self.last = clock()

    def due(self) -> list[str]:
        now = self.clock()
        if now - self.last < self.every:
            return []
        self.last = now
        return [progress_line(t) for t in self.progress.tasks if t.visible and not t.finished]


def progress_line(task: Task) -> str:
    """``<description>: <done>/<total> after <elapsed>`` (``<done> done`` where the total is unknown)."""
    done = f"{task.completed:g}/{task.total:g}" if task.total is not None else f"{task.completed:g} done"
    elapsed = int(task.elapsed or 0)
    return f"{task.description.strip()}: {done} after {elapsed // 60}m{elapsed % 60:02d}s"


class LoggedProgress(Progress):
    """A rich Progress that, where its console is no terminal, prints ``LogLines``' lines while it runs (checked
    every ``poll`` seconds in a thread of its own)."""

    def __init__(self, *columns, every: float = LOG_EVERY, poll: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, **kw) -> None:
        super().__init__(*columns, **kw)
        self.lines = None if self.console.is_terminal else LogLines(self, every, clock)
        self.poll, self.stopped, self.thread = poll, threading.Event(), None

    def start(self) -> None:
        super().start()
        if self.lines is not None and self.thread is None:
            self.stopped.clear()
            self.lines.last = self.lines.clock()
            self.thread = threading.Thread(target=self._beat, name="softeval-progress-lines", daemon=True)
            self.thread.start()

    def stop(self) -> None:
        if self.thread is not None:
            self.stopped.set()
            self.thread.join()
            self.thread = None
        super().stop()

    def _beat(self) -> None:
        while not self.stopped.wait(self.poll):
            self.print_due()

    def print_due(self) -> None:
        for line in self.lines.due() if self.lines is not None else ():
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)


def progress_bar(console: Console) -> Progress:
    """A bar with its count, the time spent and the time left (scoring, tuning), kept when done; off a terminal,
    a line per unfinished bar at least every LOG_EVERY seconds instead of silence until it ends."""
    return LoggedProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          TimeRemainingColumn(), console=console, transient=False)
