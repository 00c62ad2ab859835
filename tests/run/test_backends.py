"""The engine interface (softeval.lm.engine) and the backend registry (softeval.lm.backends): a backend
registered in the test alone, with no other change to softeval, runs a whole `softeval run`, and its outputs
equal the HF backend's (docs/backends.md, "Adding a backend")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny import tiny_lm

from softeval.cli.app import main
from softeval.lm import backends
from softeval.lm.backends import Backend, HfEngine
from softeval.lm.vllm_engine import VllmEngine
from softeval.run import pipeline, validate
from softeval.run.config import OPTIONS

TIMES = ("started_at", "finished_at", "wall_seconds")


class CountingEngine:
    """The HF engine, counting its calls and prompts: a backend of the test's own."""

    started: list[CountingEngine] = []

    def __init__(self, lm, batch_size: int) -> None:
        self.inner = HfEngine(lm, batch_size)
        self.calls = self.prompts = 0
        self.closed = False
        CountingEngine.started.append(self)

    def generate(self, seqs, **kw):
        self.calls += 1
        self.prompts += len(seqs)
        return self.inner.generate(seqs, **kw)

    def record(self) -> dict:
        return {"backend": "counting", "wraps": self.inner.record()}

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def counting():
    CountingEngine.started = []
    backends.register(Backend("counting", lambda lm, batch_size, args: CountingEngine(lm, batch_size),
                              "the HF engine, counting its calls"))
    yield CountingEngine.started
    backends.BACKENDS.pop("counting")


@pytest.fixture
def tiny_run(toy, monkeypatch):
    monkeypatch.setattr(pipeline, "load_model", lambda name, **kw: tiny_lm())
    monkeypatch.setattr(validate, "check_model_name", lambda name: None)  # 'tiny-0': no preset, folder or id


def _run(out: Path, *extra: str) -> int:
    return main(["run", "--model", "tiny-0", "--task", "toyformat", "--out", str(out), "--limit", "12",
                 "--steps", "6", "--shots", "2", "--tokens", "4", "--lr", "0.1", "--curve-every", "3",
                 "--curve-items", "4", "--eval-batch-size", "5", *extra])


def _read(out: Path, method: str) -> dict:
    run = out / "tiny-0" / "toyformat" / method / "seed0"
    files = {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    results, config = json.loads(files.pop("results.json")), json.loads(files.pop("config.json"))
    return {"files": files, "results": results, "config": config}


def test_both_built_in_engines_have_the_interface():
    for engine in (HfEngine, VllmEngine):
        assert all(callable(getattr(engine, name, None)) for name in ("generate", "record", "close"))
    assert HfEngine(tiny_lm(), 4).record() == {"backend": "hf"}  # what results.json has always said
    assert set(backends.BACKENDS) == {"hf", "vllm"} and backends.DEFAULT == "hf"
    assert OPTIONS["backend"].default == "hf" and tuple(OPTIONS["backend"].choices) == ("hf", "vllm")
    assert backends.backend_help() == OPTIONS["backend"].help == (
        "generation engine: hf (the default: softeval's own) or vllm (vLLM; log-likelihoods and tuning stay on "
        "hf; docs/backends.md)")


def test_a_backend_registered_in_a_test_runs_a_whole_run_with_the_hf_backends_outputs(tiny_run, counting,
                                                                                     tmp_path):
    assert "counting" in OPTIONS["backend"].choices  # --backend's choices are the registry's
    assert _run(tmp_path / "hf") == 0
    assert counting == []  # the hf backend made none of them
    assert _run(tmp_path / "counting", "--backend", "counting") == 0
    # one engine for the job (one `softeval run`: its three methods), closed at its end: it is not kept
    assert len(counting) == 1 and counting[0].closed
    assert counting[0].prompts == 3 * 12 and counting[0].calls == 3  # every item of every method, one chunk each
    for method in ("zero-shot", "few-shot", "soft-prompt"):
        hf, ours = _read(tmp_path / "hf", method), _read(tmp_path / "counting", method)
        assert "samples.jsonl" in hf["files"]
        if method == "soft-prompt":
            assert {"soft_prompt/adapter_model.safetensors", "curve.jsonl"} <= set(hf["files"])
        assert ours["files"] == hf["files"]  # samples.jsonl, the adapter, the curve: byte for byte
        assert {**ours["config"], "backend": "hf", "out": None} == {**hf["config"], "out": None}
        assert hf["results"]["engine"] == {"backend": "hf"}
        assert ours["results"]["engine"] == {"backend": "counting", "wraps": {"backend": "hf"}}
        assert ours["results"]["config"]["backend"] == "counting"
        for results in (hf["results"], ours["results"]):
            for key in (*TIMES, "engine"):
                results.pop(key)
            results["config"].pop("backend")
            results["config"].pop("out")
            if results["tuning"]:
                results["tuning"].pop("seconds")
        assert ours["results"] == hf["results"]


def test_engine_arguments_go_only_with_the_backend_that_reads_them(tiny_run, counting, tmp_path, capsys):
    assert _run(tmp_path, "--backend", "counting", "--vllm-arg", "max_model_len=64") == 2
    assert capsys.readouterr().err.strip() == "error: --vllm-arg sets vLLM's engine; add --backend vllm"
    assert counting == []  # refused before any model loads: no engine, no run folder
    assert not any(tmp_path.iterdir())
