"""softeval.consoles off a terminal: a progress line at least every minute of long work (a log was silent for 20
minutes of tuning), and tables as wide as COLUMNS or a wide default (rich's 80 squeezed a sweep's table)."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from softeval.consoles import LOG_EVERY, LOG_WIDTH, LoggedProgress, log_width, message_console, progress_bar


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_a_line_per_unfinished_bar_once_a_minute_and_none_sooner():
    log, clock = io.StringIO(), Clock()
    bar = LoggedProgress(console=Console(file=log, force_terminal=False, width=100), clock=clock, poll=3600)
    with bar:
        tuning = bar.add_task("tuning soft prompt (loss 0.817)", total=6)
        done = bar.add_task("scoring", total=2)
        bar.update(tuning, completed=3)
        bar.update(done, completed=2)
        clock.now += LOG_EVERY - 1
        bar.print_due()
        assert log.getvalue() == ""  # not yet a minute
        clock.now += 1
        bar.print_due()
        lines = log.getvalue().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tuning soft prompt (loss 0.817): 3/6 after ")
        clock.now += 30
        bar.print_due()
        assert len(log.getvalue().splitlines()) == 1  # a minute from the last line, not from the start
        clock.now += 30
        bar.print_due()
        assert len(log.getvalue().splitlines()) == 2


def test_on_a_terminal_the_bar_prints_no_lines_of_its_own():
    clock = Clock()
    bar = LoggedProgress(console=Console(file=io.StringIO(), force_terminal=True), clock=clock)
    assert bar.lines is None and bar.thread is None
    with bar:
        assert bar.thread is None


def test_progress_bar_runs_its_beat_only_while_it_is_on():
    bar = progress_bar(Console(file=io.StringIO(), force_terminal=False))
    assert isinstance(bar, LoggedProgress) and bar.thread is None
    with bar:
        assert bar.thread is not None and bar.thread.is_alive()
        thread = bar.thread
    assert bar.thread is None and not thread.is_alive()


def test_a_message_console_in_a_log_is_columns_or_wide_not_80(monkeypatch, capsys):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert log_width() == LOG_WIDTH >= 160
    table = Table()
    for name in ("model", "task", "method", "seed", "state", "node", "time", "note"):
        table.add_column(name)
    table.add_row("/some/long/path/to/a/model-folder", "testbed-qa-w0.yaml", "soft-prompt", "0", "done",
                  "192.0.2.2 pid 12345", "12s", "")
    message_console().print(table)
    rows = capsys.readouterr().err.splitlines()
    assert any("/some/long/path/to/a/model-folder" in r and "192.0.2.2 pid 12345" in r for r in rows)  # one line
    monkeypatch.setenv("COLUMNS", "200")
    assert log_width() == 200 and message_console().width == 200
    monkeypatch.setenv("COLUMNS", "wide")
    assert log_width() == LOG_WIDTH
