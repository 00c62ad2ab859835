"""One writer per run: a second process on a run being written exits 2 naming the holder, or waits
with --wait; a lock left by a killed process is taken over. Real processes throughout."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket

import pytest
from processes import child, wait_for_line

from softeval.store.locking import Locked
from softeval.store.runs import RunFolder


def _hold(path: str, ready, release) -> None:
    with RunFolder.at(path, "m", "t", "zero-shot", 0).lock():
        ready.set()
        release.wait(30)


def test_lock_held_by_another_process_names_it_then_is_taken_over_after_kill_9(tmp_path):
    ctx = mp.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(tmp_path), ready, release))
    holder.start()
    assert ready.wait(30)
    folder = RunFolder.at(tmp_path, "m", "t", "zero-shot", 0)
    with pytest.raises(Locked, match=rf"pid {holder.pid} on {socket.gethostname()} since 20") as err:
        with folder.lock():
            pass
    assert err.value.holder["pid"] == holder.pid
    os.kill(holder.pid, signal.SIGKILL)  # dies holding the lock: the OS frees it, its details stay
    holder.join(10)
    assert folder.lock_path.exists()
    stale = []
    with folder.lock(on_stale=stale.append) as me:
        assert me["pid"] == os.getpid()
    assert [s["pid"] for s in stale] == [holder.pid]
    assert not folder.lock_path.exists()  # released: removed


def test_two_processes_one_run_second_exits_2_naming_holder_third_waits(tmp_path):
    flag = tmp_path / "go"
    first = child(f"tune:2:pause={flag}", tmp_path / "out")
    wait_for_line(first.stdout, "PAUSED")
    second = child("none", tmp_path / "out")
    _, err = second.communicate(timeout=120)
    assert second.returncode == 2, err
    assert f"pid {first.pid} on {socket.gethostname()} since" in err and "--wait" in err
    assert "Traceback" not in err
    third = child("none", tmp_path / "out", "--wait")
    wait_for_line(third.stderr, "waiting (--wait)")
    flag.touch()
    assert first.wait(120) == 0, first.stderr.read()
    out, err = third.communicate(timeout=120)
    assert third.returncode == 0, err
    assert "finished run found" in err  # it waited, then found the first one's finished run
    run = tmp_path / "out/tiny-0/toyformat/soft-prompt"
    assert sorted(p.name for p in run.iterdir()) == ["seed0"]  # no .partial, no lock file left
