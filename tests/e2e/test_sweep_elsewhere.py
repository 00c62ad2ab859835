"""Two sweeps into one output root: a job whose run another process is writing is 'elsewhere', naming
that process, and not a failure."""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time
from pathlib import Path

from rich.console import Console
from tiny import tiny_lm, toy_config

from softeval.run import pipeline
from softeval.run.pipeline import run_folder
from softeval.store.runs import RunFolder
from softeval.sweep.driver import JobState, SweepResult
from softeval.sweep.view import SweepView
from softeval.sweep.worker import SweepWorker


def _hold(out: str, final: str, ready, release) -> None:
    with RunFolder(Path(out), Path(final)).lock():
        ready.set()
        release.wait(60)


def test_a_sweep_job_another_process_writes_is_reported_as_such_not_failed(tmp_path, toy, monkeypatch):
    """Two sweeps of one file into one out: a job whose run the other sweep is writing is 'elsewhere',
    naming that process; the sweep counts no failure (exit 0) and says where the run is made."""
    monkeypatch.setattr(pipeline, "load_lm", lambda config: tiny_lm())
    config = toy_config(tmp_path / "out", methods=("zero-shot",))
    folder = run_folder(config, "zero-shot")[0]
    ctx = mp.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(folder.out), str(folder.final), ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        answer = SweepWorker().run(config, str(tmp_path / "logs" / "tiny.log"))
    finally:
        release.set()
        holder.join(30)
    assert "error" not in answer
    assert answer["elsewhere"].startswith(f"pid {holder.pid} on {socket.gethostname()} since ")
    console = Console(file=open(os.devnull, "w"), width=300, record=True)
    job = type("Job", (), {"config": config, "method": "zero-shot",
                           "model": type("M", (), {"label": "tiny-0"})()})()
    state = JobState(job, folder.final, "running", started=time.time())
    view = SweepView(console, [state])
    view.elsewhere(state, answer["elsewhere"])
    result = SweepResult([state], 1.0)
    view.summary(result)
    text = console.export_text()
    assert result.failed == [] and state.state == "elsewhere"
    assert "1 elsewhere; 0 retried" in text and f"being written by pid {holder.pid}" in text
    assert "set `wait: true` to wait" in text
