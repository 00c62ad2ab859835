"""Prompt variants through a run (tasks/variants.py, run/pipeline.run_variants): a variant is part of the run's
identity and has its own folder, variant 0 is the run as it was before variants (its config records none), every
variant's prompts are that variant's and its samples are read by its own extractor, the model loads once for K
variants, and the spread is read back from the run folders."""

from __future__ import annotations

import json

import pytest
from tiny import tiny_lm
from toymc import mc_config

from softeval import cli
from softeval.analysis.compare import load_runs
from softeval.analysis.spread import spreads
from softeval.errors import UserError
from softeval.run import pipeline
from softeval.run.pipeline import run_job, run_variants
from softeval.store.identity import PROMPT_GRAMMAR, identity_diff
from softeval.tasks.variants import GRAMMAR_REVISION, format_of


def test_variant_zero_records_nothing_and_another_variant_is_another_run(toymc, tmp_path):
    own = mc_config(tmp_path).options("zero-shot")
    third = mc_config(tmp_path, prompt_variant=3).options("zero-shot")
    assert "prompt_variant" not in own and PROMPT_GRAMMAR not in own  # as runs recorded before variants existed
    assert third["prompt_variant"] == 3 and third[PROMPT_GRAMMAR] == GRAMMAR_REVISION
    assert "prompt_variant: not recorded -> 3" in identity_diff(own, third)
    folders = {pipeline.own_folder(mc_config(tmp_path, prompt_variant=v), "zero-shot").final for v in (0, 3)}
    assert {f.relative_to(tmp_path).parts[1] for f in folders} == {"toymc", "toymc@v3"}


def test_k_variants_score_each_prompt_load_once_and_give_a_spread(toymc, tmp_path, monkeypatch):
    loads = []
    monkeypatch.setattr(pipeline, "load_lm", lambda config: loads.append(config) or tiny_lm())
    monkeypatch.setattr(pipeline, "check_config", lambda *a, **kw: None)  # the tiny model is no preset
    per_variant = run_variants(mc_config(tmp_path, methods=("zero-shot", "few-shot")), 3)
    assert len(loads) == 1
    assert [[r["method"] for r in results] for results in per_variant] == [["zero-shot", "few-shot"]] * 3
    for variant, results in enumerate(per_variant):
        assert all(r["config"].get("prompt_variant", 0) == variant for r in results)
        folder = "toymc" if variant == 0 else f"toymc@v{variant}"
        samples = [json.loads(line) for line in
                   (tmp_path / "tiny-0" / folder / "zero-shot" / "seed0" / "samples.jsonl").read_text().splitlines()]
        fmt = format_of(toymc, variant)
        for sample in samples:
            assert sample["prompt"].endswith(toymc.cue if variant == 0 else
                                             fmt.descriptor("Answer") + fmt.separator.rstrip())
            if fmt.lower_labels:
                assert "(a) " in sample["prompt"] or "a. " in sample["prompt"]
    runs = load_runs(tmp_path)[0]
    assert sorted({r.task for r in runs}) == ["toymc", "toymc@v1", "toymc@v2"]
    found = spreads(runs)
    assert [(s.method, s.variants) for s in found] == [("zero-shot", (0, 1, 2)), ("few-shot", (0, 1, 2))]
    again = run_variants(mc_config(tmp_path, methods=("zero-shot", "few-shot")), 3)  # every run finished: skipped
    assert again == per_variant and len(loads) == 1


def test_a_variant_the_task_lacks_is_refused_before_the_model_loads(toymc, tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "load_lm", lambda config: pytest.fail("the model loaded"))
    monkeypatch.setattr(pipeline, "check_config", lambda *a, **kw: None)  # the tiny model is no preset
    with pytest.raises(UserError, match=r"--prompt-variant 100000: task toymc has prompt variants 0 to \d+"):
        run_job(mc_config(tmp_path, prompt_variant=100_000))
    with pytest.raises(UserError, match=r"--prompt-variants 999: task toymc has no 999 prompt variants"):
        run_variants(mc_config(tmp_path), 999)


def test_the_command_line(toymc, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pipeline, "load_lm", lambda config: tiny_lm())
    monkeypatch.setattr(pipeline, "check_config", lambda *a, **kw: None)  # the tiny model is no preset
    base = ["run", "--model", "tiny-0", "--task", "toymc", "--method", "zero-shot", "--limit", "6", "--device", "cpu",
            "--out", str(tmp_path), "--eval-batch-size", "4", "--batch-size", "2", "--curve-items", "0"]
    assert cli.main([*base, "--prompt-variants", "3"]) == 0
    said = capsys.readouterr().out
    assert "across prompt variants 0, 1, 2: mean [min, max] (std)" in said
    assert cli.main([*base, "--prompt-variants", "2", "--prompt-variant", "1"]) == 2
    assert "leave out --prompt-variant 1" in capsys.readouterr().err
    assert cli.main([*base, "--prompt-variants", "0"]) == 2
