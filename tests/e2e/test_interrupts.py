"""Stopping a run from outside: SIGTERM during tuning exits as Ctrl-C does (143 for 130), with the
same last line. A signal in the middle of a tuning step lets the step finish and keeps it (no step lost), the
resumed run ends bit-identical to an uninterrupted one, and no process of the command's group is left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from processes import child, wait_for_line
from sweepfiles import write_tasks
from tiny import tiny_model, tiny_tokenizer

MAIN = "import sys; from softeval.cli.app import main; sys.exit(main())"
INTERRUPTED = "interrupted: finished runs are kept; an unfinished tuning resumes next time"


def group_gone(pgid: int) -> bool:
    """No process is left in the process group ``pgid`` (a child started with start_new_session)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_signal_mid_step_keeps_the_step_says_so_and_resumes_bit_identical(tmp_path):
    said = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        flag = tmp_path / f"go-{sig}"
        proc = child(f"tune:2:pause={flag}", tmp_path / f"out-{sig}", start_new_session=True)
        wait_for_line(proc.stdout, "PAUSED")  # in the middle of step 2's backward
        proc.send_signal(sig)
        wait_for_line(proc.stderr, "stopping once this tuning step is done")
        flag.touch()  # the step goes on to its end
        _, err = proc.communicate(timeout=120)
        said[sig] = (proc.returncode, err.strip().splitlines()[-1])
        assert group_gone(proc.pid)
        state = next((tmp_path / f"out-{sig}").rglob("seed0.partial/tune_state.json"))
        assert json.loads(state.read_text())["step"] == 2  # the steps done: none lost
    assert said[signal.SIGTERM] == (143, INTERRUPTED)
    assert said[signal.SIGINT] == (130, INTERRUPTED)

    resumed = child("none", tmp_path / f"out-{signal.SIGTERM}")
    full = child("none", tmp_path / "full")
    for proc in (resumed, full):
        proc.communicate(timeout=120)
        assert proc.returncode == 0
    [mine] = (tmp_path / f"out-{signal.SIGTERM}").rglob("seed0/soft_prompt")
    [theirs] = (tmp_path / "full").rglob("seed0/soft_prompt")
    assert {p.name: p.read_bytes() for p in mine.iterdir()} == {p.name: p.read_bytes() for p in theirs.iterdir()}
    tuning = json.loads((mine.parent / "results.json").read_text())["tuning"]
    assert tuning["resumed_at_steps"] == [2]


def _stopped_once_running(argv: list[str], running: str, log: Path) -> tuple[int, list[str], list]:
    """``softeval argv`` in a session of its own, given SIGTERM once its stderr says ``running``: its exit code, its
    stderr's lines and the processes it had started (all of them, Ray's included)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-c", MAIN, *argv], env=env, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)
        deadline = time.monotonic() + 300
        while running not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        started = psutil.Process(proc.pid).children(recursive=True)
        assert started  # Ray's processes
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert group_gone(proc.pid)
    return proc.returncode, log.read_text().strip().splitlines(), started


def _tiny_model(folder: Path) -> Path:
    tok = tiny_tokenizer()
    tiny_model(len(tok), seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


# a soft prompt that tunes far longer than any test waits: SIGTERM lands in the middle of its tuning
LONG = {"limit": 8, "steps": 100000, "tokens": 2, "shots": 1, "batch_size": 4, "eval_batch_size": 8,
        "curve_every": 50000}


@pytest.mark.parametrize("command", ["sweep", "track"])
def test_sigterm_mid_sweep_stops_says_so_keeps_what_is_finished_and_leaves_no_process(tmp_path, command):
    """`softeval sweep` (and `track`, a sweep of one series) on its own Ray, given SIGTERM while a job runs: exit 143
    within seconds, the interrupted line last, and no process it started left (Ray's raylet, GCS and workers
    included; it aborted with 134 and left processes of its group alive)."""
    task = tmp_path / write_tasks(tmp_path)[0]
    out = tmp_path / "out"
    if command == "sweep":
        spec = {"out": str(out), "models": [str(_tiny_model(tmp_path / "tiny-0"))], "tasks": [str(task)],
                "methods": ["zero-shot", "soft-prompt"], **LONG}
        (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(spec))
        argv = ["sweep", str(tmp_path / "sweep.yaml")]
    else:
        _tiny_model(tmp_path / "series" / "checkpoint-1")
        argv = ["track", str(tmp_path / "series"), "--task", str(task), "--method", "zero-shot,soft-prompt",
                "--out", str(out), *[a for k, v in LONG.items() for a in (f"--{k.replace('_', '-')}", str(v))]]
    code, lines, started = _stopped_once_running(argv, "soft-prompt / seed 0 on", tmp_path / "err.log")
    assert (code, lines[-1]) == (143, INTERRUPTED), lines[-5:]
    assert not [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert list(out.rglob("zero-shot/seed0/results.json"))  # what was finished is kept


@pytest.mark.slow  # it pre-trains its 8 tiny models first (about a minute on 2 cores)
def test_sigterm_in_the_testbeds_sweep_phase_stops_says_so_and_leaves_no_process(tmp_path):
    """The case of the issue: `softeval testbed` given SIGTERM in its sweep phase (Ray) aborted with 134, said
    nothing and left 2 processes of its group alive."""
    code, lines, started = _stopped_once_running(
        ["testbed", "--quick", "--people", "8", "--steps", "2", "--out", str(tmp_path / "out")], "running ",
        tmp_path / "err.log")
    assert (code, lines[-1]) == (143, INTERRUPTED), lines[-5:]
    assert not [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert list((tmp_path / "out" / "testbed").rglob("config.json"))  # the trained models are kept
