"""A soft-prompt run's identity holds the tuning dtype as this machine resolves ``--tune-dtype``: the same
command tuned in bf16 (as ``auto`` did on a host with AMX before it meant the run's dtype) and in fp32 is two
runs, refused until --force; a run recorded before the key counts as what it ran; a remote sweep's driver,
which cannot resolve it, leaves it to the worker."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console
from tiny import tiny_lm, toy_config

from softeval.lm import precision
from softeval.run.config import resolved_tune_dtype
from softeval.run.pipeline import is_finished, run_folder, run_job
from softeval.store.identity import TUNE_DTYPE_RESOLVED
from softeval.store.runs import OtherSettings


def run(config) -> list[dict]:
    return run_job(config, console=Console(file=io.StringIO()), lm=tiny_lm())


def host(monkeypatch, amx: bool) -> None:
    monkeypatch.setattr(precision, "cpu_bf16", lambda: amx)


def _recorded_as(config, dtype: str, key: bool = True) -> None:
    """Rewrite the finished soft-prompt run of ``config`` as one that tuned in ``dtype`` (as an AMX host's
    ``auto`` did before it meant the run's dtype); without ``key``, as written before the key existed."""
    results = run_folder(config, "soft-prompt")[0].final / "results.json"
    data = json.loads(results.read_text())
    data["tuning"]["tune_dtype_ran"] = dtype
    if key:
        data["config"][TUNE_DTYPE_RESOLVED] = dtype
    else:
        data["config"].pop(TUNE_DTYPE_RESOLVED, None)
    results.write_text(json.dumps(data))


def test_a_changed_resolution_is_another_run(toy, tmp_path, monkeypatch):
    config = toy_config(tmp_path, methods=("zero-shot", "soft-prompt"), steps=2, limit=6)  # --tune-dtype auto
    host(monkeypatch, amx=True)
    assert resolved_tune_dtype(config) == "float32"  # auto tunes in the run's dtype, AMX or not
    first = run(config)
    assert [r["config"][TUNE_DTYPE_RESOLVED] for r in first] == ["float32", "float32"]
    assert first[1]["tuning"]["tune_dtype_ran"] == "float32" and first[1]["config"]["tune_dtype"] == "auto"
    _recorded_as(config, "bfloat16")  # the same command tuned in bf16 (an AMX host's auto before): other numbers
    with pytest.raises(OtherSettings, match="tune_dtype_resolved: 'bfloat16' -> 'float32'.*--force"):
        run(config)
    assert is_finished(config, "zero-shot")  # zero-shot does not tune: the same run either way
    assert is_finished(config, "soft-prompt", here=False)  # a remote driver leaves it to the worker
    again = run(toy_config(tmp_path, methods=("soft-prompt",), steps=2, limit=6, force=True))
    assert again[0]["tuning"]["tune_dtype_ran"] == again[0]["config"][TUNE_DTYPE_RESOLVED] == "float32"
    assert is_finished(config, "soft-prompt")


def test_a_run_recorded_before_the_key_is_what_it_ran(toy, tmp_path, monkeypatch):
    config = toy_config(tmp_path, methods=("soft-prompt",), steps=2, limit=6)
    host(monkeypatch, amx=False)
    run(config)
    _recorded_as(config, "float32", key=False)
    assert is_finished(config, "soft-prompt")  # it ran float32 (tuning.tune_dtype_ran), as auto does now
    _recorded_as(config, "bfloat16", key=False)
    with pytest.raises(OtherSettings, match="tune_dtype_resolved: 'bfloat16' -> 'float32'"):
        is_finished(config, "soft-prompt")
