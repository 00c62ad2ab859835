"""Run folders: one name rule for writer and readers, the complete run identity, safe checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny import tiny_lm

from softeval import index
from softeval.pipeline import RunConfig, run_job
from softeval.runs import folder_name

EXAMPLE = Path(__file__).parents[1] / "examples" / "capitals" / "capitals.yaml"


def _capitals(out: Path, task: str, **kw) -> RunConfig:
    base = dict(model="tiny-0", task=task, methods=("zero-shot",), limit=4, steps=2, tokens=2, batch_size=2,
                eval_batch_size=4, curve_items=0, out=str(out))
    return RunConfig(**{**base, **kw})


@pytest.mark.parametrize("how", ["absolute", "relative"])
def test_custom_task_runs_reach_the_index_compare_and_report(tmp_path, monkeypatch, how):
    from softeval.compare import load_runs
    from softeval.report import build_report

    if how == "relative":
        monkeypatch.chdir(EXAMPLE.parents[2])
    task = str(EXAMPLE) if how == "absolute" else "examples/capitals/capitals.yaml"
    run_job(_capitals(tmp_path / "runs", task), lm=tiny_lm())
    assert [(r["task"], r["method"]) for r in index.list_runs(tmp_path / "runs")] == [(task, "zero-shot")]
    runs, skipped = load_runs(tmp_path / "runs")
    assert [r.task for r in runs] == [task] and skipped == []
    page = build_report(tmp_path / "runs", tmp_path / "report.html").read_text()
    assert "capitals.yaml" in page


def test_folder_name_is_one_pure_rule():
    assert folder_name("examples/capitals/capitals.yaml") == "capitals.yaml"  # whether the file exists or not
    assert folder_name("/data/tasks/capitals.yml") == "capitals.yml"
    assert folder_name("./models/my-model/") == "my-model"
    assert folder_name("HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB--SmolLM2-135M"
    assert folder_name("my tasks/qa") == "my--tasks--qa"
    assert folder_name("mmlu") == "mmlu"
