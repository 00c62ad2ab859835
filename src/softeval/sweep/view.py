"""What a sweep shows: the job table (dry run, live, final) and one line per change in logs.

On a terminal the table is live (rich); elsewhere (CI logs, a file) every change is one plain line, so
a log says which job ran where and when, and why one failed.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from softeval.consoles import LOG_EVERY, message_console
from softeval.store.format import folder_name

STYLE = {"queued": "dim", "running": "cyan", "done": "green", "skipped": "dim green", "elsewhere": "yellow",
         "failed": "bold red"}
SUMMED = ("done", "skipped", "elsewhere", "failed")  # the states a finished sweep counts
ELSEWHERE = ("being written by another process (a sweep or `softeval run` on the same out), not run here: "
             "see its result there, or set `wait: true` to wait for such runs")


def task_name(task: str) -> str:
    return folder_name(task) if "/" in task or task.endswith((".yaml", ".yml", ".json")) else task


def node_name(info: dict | None) -> str:
    if not info:
        return ""
    return f"{info.get('node_ip', '?')} pid {info.get('pid', '?')}"


def job_table(states, title: str, out: Path | None = None, only=None) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("model", "task", "method", "seed", "state", "node", "time", "note"):
        table.add_column(col, overflow="fold", justify="right" if col in ("seed", "time") else "left")
    for s in states:
        if only is not None and s.state not in only:
            continue
        c = s.job.config
        elapsed = s.seconds if s.seconds is not None else (time.time() - s.started if s.started else None)
        note = s.error or (f"retried {s.retries}x" if s.retries else "")
        if s.state == "queued" and out is not None:
            note = note or str(s.folder.relative_to(out))
        table.add_row(Text(s.job.model.label), Text(task_name(c.task)), s.job.method, str(c.seed),
                      Text(s.state, style=STYLE[s.state]), Text(s.node), "" if elapsed is None else f"{elapsed:.0f}s",
                      Text(note))
    return table


def print_notes(sweep) -> None:
    """The sweep's notes (Sweep.notes: options written that no run of a task uses), on stderr, once every check has
    passed: before the dry run's plan, and before a sweep's jobs start."""
    for note in sweep.notes:
        message_console().print(note, style="yellow", markup=False, highlight=False, soft_wrap=True)


def print_plan(console: Console, sweep, states, cluster_gpus: float | None = None) -> None:
    """The dry run: every job with its run folder and whether it is finished, and each model's resources (after
    the sweep's notes)."""
    print_notes(sweep)
    console.print(f"{sweep.path}: run folders under {sweep.out}", markup=False, highlight=False)
    table = Table(title=f"{len(states)} runs: {sum(s.state == 'queued' for s in states)} to do, "
                        f"{sum(s.state == 'skipped' for s in states)} finished", title_justify="left")
    for col in ("model", "task", "method", "seed", "run folder", "status"):
        table.add_column(col, overflow="fold", justify="right" if col == "seed" else "left")
    for s in states:
        c = s.job.config
        table.add_row(Text(s.job.model.label), Text(task_name(c.task)), s.job.method, str(c.seed),
                      Text(str(s.folder.relative_to(sweep.out))),
                      Text("finished" if s.state == "skipped" else "to do",
                           style="green" if s.state == "skipped" else "cyan"))
    console.print(table)
    res = Table(title="resources asked for, per model (one Ray worker each)", title_justify="left")
    for col in ("model", "kind", "post-trained partner", "resources", "jobs to do"):
        res.add_column(col, overflow="fold")
    for m in sweep.models:
        todo = sum(1 for s in states if s.job.model is m and s.state == "queued")
        partner = next((p.label for p in sweep.models if p.name == m.post_trained), "") if m.post_trained else ""
        res.add_row(Text(m.label), m.kind or "auto", Text(partner), m.resources.describe(), str(todo))
    console.print(res)


class SweepView:
    """Live table on a terminal, one line per change elsewhere, and there also the counts at least every
    LOG_EVERY seconds while jobs run (a job can run for many minutes); ``on_event`` sees every change."""

    def __init__(self, console: Console, states, on_event=None, clock=time.monotonic) -> None:
        self.console, self.states, self.on_event = console, states, on_event
        self.live: Live | None = None
        self.started = time.time()
        self.clock = clock
        self.said = clock()  # when the last line was printed (off a terminal)

    def __enter__(self):
        if self.console.is_terminal:
            self.live = Live(self._render(), console=self.console, refresh_per_second=2, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)
            self.live = None

    def _counts(self) -> str:
        counts = Counter(s.state for s in self.states)
        return f"sweep: {time.time() - self.started:.0f}s, " + ", ".join(
            f"{counts[k]} {k}" for k in ("running", "queued", *SUMMED) if counts[k])

    def _render(self):
        head = Text(self._counts())
        rows = self.console.size.height - 8
        active = [s for s in self.states if s.state in ("running", "failed")]
        active += [s for s in self.states if s.state == "queued"][:max(0, rows - len(active))]
        return Group(head, job_table(active, "running, failed and next jobs"))

    def refresh(self) -> None:
        if self.live is not None:
            self.live.update(self._render())
        elif self.clock() - self.said >= LOG_EVERY:
            self._say(self._counts())

    def _say(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False)
        self.said = self.clock()

    def _event(self, kind: str, state, info: dict | None, line: str) -> None:
        if self.live is None:
            self._say(line)
        else:
            self.live.update(self._render())
        if self.on_event is not None:
            self.on_event(kind, state, info or {})

    def _name(self, s) -> str:
        c = s.job.config
        return f"{s.job.model.label} / {task_name(c.task)} / {s.job.method} / seed {c.seed}"

    def running(self, state, info: dict) -> None:
        state.state, state.node, state.started, state.seconds = "running", node_name(info), time.time(), None
        self._event("running", state, info, f"running  {self._name(state)} on {state.node}")

    def done(self, state, answer: dict) -> None:
        state.seconds = time.time() - state.started
        state.state = "skipped" if answer.get("skipped") else "done"
        loaded = f", model loaded in {answer['load_seconds']:.1f}s" if answer.get("load_seconds") else ""
        self._event(state.state, state, None, f"{state.state:8} {self._name(state)} in {state.seconds:.1f}s{loaded}")

    def failed(self, state, error: str) -> None:
        if state.started is not None:
            state.seconds = time.time() - state.started
        state.state, state.error = "failed", error
        self._event("failed", state, None, f"failed   {self._name(state)}: {error}")

    def elsewhere(self, state, holder: str) -> None:
        """Another process holds the job's run lock: its run, reported as such and not as a failure."""
        state.seconds = time.time() - state.started
        state.state, state.error = "elsewhere", f"being written by {holder}"
        self._event("elsewhere", state, None, f"elsewhere {self._name(state)}: {state.error}")

    def retry(self, state, info: dict, why: str) -> None:
        state.state, state.started = "queued", None
        self._event("retry", state, info, f"retry    {self._name(state)}: its worker ({node_name(info)}) died "
                                          f"({why}); retry {state.retries}, resuming from its .partial folder")

    def summary(self, result) -> None:
        counts = Counter(s.state for s in result.states)
        self.console.print(job_table(result.states, f"sweep finished in {result.seconds:.0f}s"))
        self.console.print(", ".join(f"{counts[k]} {k}" for k in SUMMED if counts[k])
                           + f"; {sum(s.retries for s in result.states)} retried after a worker died",
                           markup=False, highlight=False)
        if counts["elsewhere"]:
            self.console.print(f"{counts['elsewhere']} elsewhere: {ELSEWHERE}", markup=False, highlight=False)
        for note in result.notes:
            self.console.print(f"note: {note}", style="yellow", markup=False, highlight=False)
        for label, path in (("compare", result.compare_path), ("report", result.report_path)):
            if path is not None:
                self.console.print(f"{label}: {path}", markup=False, highlight=False)
