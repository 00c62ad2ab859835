"""kill -9 at random moments (scoring, tuning, finishing, indexing), resumed each time: the run ends
with the same files as an uninterrupted one. Real processes, the tiny model, a few seconds each."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

from processes import child

from softeval.store import index

METHODS = ("zero-shot", "soft-prompt")
VOLATILE = {"started_at", "finished_at", "wall_seconds", "git"}


def _run(hook: str, out: Path) -> subprocess.CompletedProcess:
    proc = child(hook, out, "--method", ",".join(METHODS))
    stdout, stderr = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _files(run: Path) -> dict:
    results = json.loads((run / "results.json").read_text())
    for key in VOLATILE:
        results.pop(key)
    results["config"].pop("out")
    if results.get("tuning"):
        results["tuning"].pop("seconds")
        results["tuning"].pop("resumed_at_steps")
    found = {"results": results, "samples": (run / "samples.jsonl").read_bytes()}
    if (run / "curve.jsonl").exists():
        found["curve"] = (run / "curve.jsonl").read_bytes()
        found["soft_prompt"] = (run / "soft_prompt" / "adapter_model.safetensors").read_bytes()
    return found


def test_kill_9_at_random_moments_then_resume_gives_the_uninterrupted_results(tmp_path):
    rng = random.Random(20261130)
    # zero-shot: 6 items in scoring chunks of 4 (2 chunks); soft-prompt: 4 tuning steps, checkpoints
    # at steps 2 and 4, then 2 scoring chunks; then finishing (samples written, results.json not yet)
    # and indexing (folder renamed into place, index not told).
    plan = [f"score:{rng.randint(1, 2)}:kill", f"tune:{rng.randint(1, 4)}:kill",
            f"score:{rng.randint(1, 2)}:kill", "finish:1:kill", "index:1:kill", "none"]
    reference = _run("none", tmp_path / "reference")
    assert reference.returncode == 0, reference.stderr
    for hook in plan:
        done = _run(hook, tmp_path / "killed")
        expected = 0 if hook == "none" else -9
        assert done.returncode == expected, f"{plan}: {hook} gave {done.returncode}\n{done.stderr}"
    for method in METHODS:
        rel = f"tiny-0/toyformat/{method}/seed0"
        assert _files(tmp_path / "killed" / rel) == _files(tmp_path / "reference" / rel), (plan, method)
    assert sorted(r["method"] for r in index.list_runs(tmp_path / "killed")) == sorted(METHODS)
    leftovers = [p.name for p in (tmp_path / "killed").rglob("*") if p.name.endswith((".partial", ".lock"))]
    assert leftovers == [], plan
