"""The engine interface (softeval.lm.engine) and the backend registry (softeval.lm.backends): a backend that
another distribution adds through the entry-point group ``softeval.backends``, with no change to softeval, runs a
whole `softeval run` and its outputs equal the HF backend's; engines are imported only when their backend is
chosen, and `--help` lists the backends there are when it is shown (docs/reference/architecture.md, "Adding a
backend")."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from distributions import installed
from tiny import tiny_lm

from softeval.cli.app import main
from softeval.lm import backends
from softeval.lm.backends import Backend
from softeval.lm.hf_engine import HfEngine
from softeval.lm.vllm_engine import VllmEngine
from softeval.run import pipeline, validate
from softeval.run.config import OPTIONS, SWEEP_FILE, RunConfig

TIMES = ("started_at", "finished_at", "wall_seconds")

# A distribution of the test's own, installed by putting its folder on sys.path: a package that describes a
# backend (light: it imports softeval's registry only) and names its engine, a thin wrapper on the HF engine
# counting its calls, in a module of its own; and an entry point whose package is not there.
PLUGIN = {
    "softeval_counting/__init__.py": """
        from softeval.lm.backends import Backend

        BACKEND = Backend("counting", "softeval_counting.engine:start", "the HF engine, counting its calls")
        """,
    "softeval_counting/engine.py": """
        from softeval.lm.hf_engine import HfEngine

        STARTED = []


        class CountingEngine:
            def __init__(self, lm, batch_size):
                self.inner = HfEngine(lm, batch_size)
                self.calls = self.prompts = 0
                self.closed = False
                STARTED.append(self)

            def generate(self, seqs, **kw):
                self.calls += 1
                self.prompts += len(seqs)
                return self.inner.generate(seqs, **kw)

            def record(self):
                return {"backend": "counting", "wraps": self.inner.record()}

            def close(self):
                self.closed = True


        def start(lm, batch_size, engine_args):
            return CountingEngine(lm, batch_size)
        """,
    "softeval_counting-1.0.dist-info/METADATA": """
        Metadata-Version: 2.1
        Name: softeval-counting
        Version: 1.0
        """,
    "softeval_counting-1.0.dist-info/entry_points.txt": """
        [softeval.backends]
        counting = softeval_counting:BACKEND
        broken = softeval_not_installed:BACKEND
        """,
}
PLUGIN_MODULES = ("softeval_counting", "softeval_counting.engine")


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The test's distribution installed (its folder on sys.path) for one test; its modules and entry points
    forgotten after (entry points are read once per process: softeval/registry.py)."""
    with installed(tmp_path / "site", PLUGIN, PLUGIN_MODULES, monkeypatch):
        yield


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


def _help(capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--help"])
    assert exit_.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse's line wrapping undone


def test_both_built_in_engines_have_the_interface():
    for engine in (HfEngine, VllmEngine):
        assert all(callable(getattr(engine, name, None))
                   for name in ("generate", "loglikelihood", "loglikelihood_refusal", "record", "close"))
    assert HfEngine(tiny_lm(), 4).record() == {"backend": "hf"}  # what results.json has always said
    assert backends.names() == ("hf", "vllm") and backends.DEFAULT == "hf"  # no other installed here
    assert OPTIONS["backend"].default == "hf" and tuple(OPTIONS["backend"].choices) == ("hf", "vllm")
    assert backends.backend_help() == OPTIONS["backend"].help() == (
        "generation engine: hf (the default: softeval's own) or vllm (vLLM; tuning, and log-likelihoods under a soft "
        "prompt, stay on hf; docs/reference/backends.md)")


def test_no_engine_is_imported_until_its_backend_is_chosen():
    """The registry, the whole command line and a run's checks import no engine: the vLLM engine's module (and
    vLLM) only when --backend vllm starts one, the HF engine's when an hf run generates."""
    script = textwrap.dedent("""
        import sys

        from softeval.lm import backends
        from softeval.cli.app import build_parser
        from softeval.run.config import RunConfig
        from softeval.run.validate import check_backend

        build_parser().parse_args(["run", "--model", "m", "--task", "mmlu", "--backend", "vllm"])
        backends.backend_help()
        assert backends.backend("vllm").takes_args
        check_backend(RunConfig(model="m", task="mmlu"))
        print(sorted(m for m in sys.modules if m.startswith(("vllm", "softeval.lm.vllm", "softeval.lm.hf_engine"))))
        """)
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "[]"


def test_a_backend_of_another_distribution_runs_a_whole_run_with_the_hf_backends_outputs(tiny_run, plugin,
                                                                                         tmp_path):
    assert "counting" in OPTIONS["backend"].choices  # --backend's choices are the registry's, entry points included
    assert _run(tmp_path / "hf") == 0
    assert not set(PLUGIN_MODULES) & set(sys.modules)  # an hf run loads no other backend, not even its description
    assert _run(tmp_path / "counting", "--backend", "counting") == 0
    counting = sys.modules["softeval_counting.engine"].STARTED
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


def test_help_lists_the_backends_there_are_when_it_is_shown(plugin, capsys):
    """The option table was defined when softeval was imported; an installed distribution's backend and one
    registered since are in --help, the entry point that does not load said as such, and no engine imported."""
    backends.register(Backend("late", "softeval.lm.hf_engine:start", "registered after the table"))
    try:
        shown = _help(capsys)
    finally:
        backends.unregister("late")
    assert "--backend {hf,vllm,late,counting,broken}" in shown
    assert ("generation engine: hf (the default: softeval's own), vllm (vLLM; tuning, and log-likelihoods under a "
            "soft prompt, stay on hf; docs/reference/backends.md), late (registered after the table), counting (the HF "
            "engine, counting its calls) or broken (its entry point does not load: choose it to see why)") in shown
    assert "softeval_counting.engine" not in sys.modules  # the description loaded, not the engine
    assert "late (registered" not in _help(capsys)


def test_an_entry_point_that_does_not_load_is_one_line(tiny_run, plugin, tmp_path, capsys):
    out = tmp_path / "out"
    assert _run(out, "--backend", "broken") == 2
    assert capsys.readouterr().err.strip() == (
        "error: backend broken (softeval.backends entry point softeval_not_installed:BACKEND of softeval-counting) "
        "does not load (ModuleNotFoundError: No module named 'softeval_not_installed'): fix or reinstall that "
        "package, or choose another backend")
    with pytest.raises(SystemExit) as exit_:
        _run(out, "--backend", "countin")
    assert exit_.value.code == 2 and capsys.readouterr().err.strip().endswith(
        "invalid choice: 'countin' (choose from 'hf', 'vllm', 'counting', 'broken') (did you mean 'counting'?) "
        "(see softeval run --help)")
    assert not out.exists()


def test_engine_arguments_go_only_with_a_backend_that_reads_them(tiny_run, plugin, tmp_path, capsys):
    out = tmp_path / "out"
    assert _run(out, "--backend", "counting", "--engine-arg", "max_model_len=64") == 2
    assert capsys.readouterr().err.strip() == ("error: --engine-arg sets a backend's engine, and --backend counting "
                                               "takes no engine arguments: add --backend vllm, or leave it out")
    assert "softeval_counting.engine" not in sys.modules  # refused before any model loads: no engine, no run folder
    assert not out.exists()
    config = RunConfig(model="tiny-0", task="toyformat", engine_args={"max_model_len": 64})
    with pytest.raises(Exception, match="^'engine_args' sets a backend's engine, and backend: hf takes no engine "
                                        "arguments: add backend: vllm, or leave it out$"):
        validate.check_backend(config, SWEEP_FILE)
