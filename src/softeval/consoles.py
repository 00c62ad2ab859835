"""The console tables are printed to, and the progress bar a job's long steps draw."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

PIPE_WIDTH = 400  # a log file or pipe has no width to fit: tables are never cut or squeezed there


def table_console(stderr: bool = False) -> Console:
    """A console that prints whole tables: the terminal's width on a terminal, wide enough for any
    of softeval's tables when the output goes to a file or a pipe (rich would assume 80 columns and
    cut the last columns off)."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=PIPE_WIDTH)


def message_console() -> Console:
    """The console a command's messages go to (stderr): as rich draws them on a terminal; in a log file or a
    pipe each message is one line, never wrapped mid-sentence at rich's assumed 80 columns."""
    console = Console(stderr=True)
    return console if console.is_terminal else Console(stderr=True, soft_wrap=True)


def progress_bar(console: Console) -> Progress:
    """A bar with its count, the time spent and the time left (scoring, tuning), kept when done."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=console, transient=False)
