"""Stopping a run from outside: SIGTERM during tuning exits as Ctrl-C does (143 for 130), with the
same last line, and leaves the unfinished tuning to resume."""

from __future__ import annotations

import signal

from processes import child, wait_for_line


def test_sigterm_during_tuning_says_what_ctrl_c_says(tmp_path):
    said = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        flag = tmp_path / f"go-{sig}"
        proc = child(f"tune:2:pause={flag}", tmp_path / f"out-{sig}")
        wait_for_line(proc.stdout, "PAUSED")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        said[sig] = (proc.returncode, err.strip().splitlines()[-1])
    assert said[signal.SIGTERM] == (143, "interrupted: finished runs are kept; an unfinished tuning resumes "
                                         "next time")
    assert said[signal.SIGINT] == (130, said[signal.SIGTERM][1])
    assert list((tmp_path / f"out-{signal.SIGTERM}").rglob("seed0.partial"))  # its tuning resumes next time
