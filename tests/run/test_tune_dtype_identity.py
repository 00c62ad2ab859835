"""A soft-prompt run's identity holds the tuning dtype as this machine resolves ``--tune-dtype`` (issue
42): the same command tuned in bf16 on a host with AMX and in fp32 on one without is two runs, refused
until --force; a run recorded before the key counts as what it ran; a remote sweep's driver, which
cannot resolve it, leaves it to the worker."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console
from tiny import tiny_lm, toy_config

from softeval.lm import precision
from softeval.run.config import resolved_tune_dtype
from softeval.run.pipeline import is_finished, run_folder, run_job
from softeval.store.runs import TUNE_DTYPE_RESOLVED, OtherSettings


def run(config) -> list[dict]:
    return run_job(config, console=Console(file=io.StringIO()), lm=tiny_lm())


def host(monkeypatch, amx: bool) -> None:
    monkeypatch.setattr(precision, "cpu_bf16", lambda: amx)


def test_a_changed_resolution_is_another_run(toy, tmp_path, monkeypatch):
    config = toy_config(tmp_path, methods=("zero-shot", "soft-prompt"), steps=2, limit=6)  # --tune-dtype auto
    host(monkeypatch, amx=True)
    assert resolved_tune_dtype(config) == "bfloat16"
    first = run(config)
    assert [r["config"][TUNE_DTYPE_RESOLVED] for r in first] == ["bfloat16", "bfloat16"]
    assert first[1]["tuning"]["tune_dtype_ran"] == "bfloat16" and first[1]["config"]["tune_dtype"] == "auto"
    host(monkeypatch, amx=False)  # another host: auto is the run's float32 there
    with pytest.raises(OtherSettings, match="tune_dtype_resolved: 'bfloat16' -> 'float32'.*--force"):
        run(config)
    assert is_finished(config, "zero-shot")  # zero-shot does not tune: the same run on either host
    assert is_finished(config, "soft-prompt", here=False)  # a remote driver leaves it to the worker
    again = run(toy_config(tmp_path, methods=("soft-prompt",), steps=2, limit=6, force=True))
    assert again[0]["tuning"]["tune_dtype_ran"] == again[0]["config"][TUNE_DTYPE_RESOLVED] == "float32"
    assert is_finished(config, "soft-prompt")


def test_a_run_recorded_before_the_key_is_what_it_ran(toy, tmp_path, monkeypatch):
    config = toy_config(tmp_path, methods=("soft-prompt",), steps=2, limit=6)
    host(monkeypatch, amx=False)
    run(config)
    results = run_folder(config, "soft-prompt")[0].final / "results.json"
    data = json.loads(results.read_text())
    del data["config"][TUNE_DTYPE_RESOLVED]  # as written before the key existed
    results.write_text(json.dumps(data))
    assert is_finished(config, "soft-prompt")  # it ran float32 (tuning.tune_dtype_ran), as this host would
    host(monkeypatch, amx=True)
    with pytest.raises(OtherSettings, match="tune_dtype_resolved: 'float32' -> 'bfloat16'"):
        is_finished(config, "soft-prompt")
