"""Stopping a run from outside: SIGTERM during tuning exits as Ctrl-C does (143 for 130), with the
same last line. A signal in the middle of a tuning step lets the step finish and keeps it (no step lost), the
resumed run ends bit-identical to an uninterrupted one, and no process of the command's group is left."""

from __future__ import annotations

import json
import os
import signal

from processes import child, wait_for_line

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


def test_sigterm_mid_sweep_stops_says_so_keeps_what_is_finished_and_leaves_no_process(tmp_path):
    """`softeval sweep` on its own Ray, given SIGTERM while a job runs: exit 143 within seconds, the interrupted line
    last, and no process it started left (Ray's raylet, GCS and workers included; it aborted with 134 and left
    processes of its group alive). The one test of a sweep's signal path (`track` and the testbed's sweep phase go
    through the same driver, softeval.sweep.driver.run_sweep)."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    import psutil
    import yaml
    from sweepfiles import write_tasks
    from tiny import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    model = tmp_path / "tiny-0"
    tiny_model(len(tok), seed=0).save_pretrained(model)
    tok.save_pretrained(model)
    tasks = write_tasks(tmp_path)
    spec = {"out": str(tmp_path / "out"), "models": [str(model)], "tasks": [str(tmp_path / tasks[0])],
            "methods": ["zero-shot", "soft-prompt"], "limit": 8, "steps": 100000, "tokens": 2, "shots": 1,
            "batch_size": 4, "eval_batch_size": 8, "curve_every": 50000}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(spec))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    err = tmp_path / "err.log"
    with err.open("w") as log:
        proc = subprocess.Popen([sys.executable, "-c", MAIN, "sweep", str(tmp_path / "sweep.yaml")],
                                env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 180
        while "soft-prompt / seed 0 on" not in err.read_text():  # zero-shot done, the tuning running
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.5)
        started = psutil.Process(proc.pid).children(recursive=True)
        assert started  # Ray's processes
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    lines = err.read_text().strip().splitlines()
    assert (proc.returncode, lines[-1]) == (143, INTERRUPTED), lines[-5:]
    assert not [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert group_gone(proc.pid)
    assert list((tmp_path / "out").rglob("zero-shot/seed0/results.json"))  # what was finished is kept
