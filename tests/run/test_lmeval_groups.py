"""An lm-eval group run as its subtasks (each a run of its own) on the tiny model, its record in the output
root, and its score as lm-eval's own ``Group.aggregate`` gives it from the same per-task scores."""

from __future__ import annotations

import json

import pytest
from lmevalyamls import GROUP, MC, MC2, write_group
from tiny import tiny_lm

from softeval.analysis.compare import load_runs
from softeval.analysis.lmeval_groups import group_scores
from softeval.errors import UserError
from softeval.run.config import RunConfig
from softeval.run.lmeval_groups import run_group
from softeval.run.pipeline import run_job
from softeval.store.lmeval_groups import read_groups
from softeval.tasks.lmeval_bridge import manager

pytest.importorskip("lm_eval")


def config(out, folder, **kw) -> RunConfig:
    base = dict(model="tiny-0", task=f"lm-eval:{GROUP}", include_path=str(folder), steps=2, tokens=3, lr=0.1,
                out=str(out), curve_every=1, curve_items=2, eval_batch_size=4, batch_size=4, chat_template="off",
                methods=("zero-shot", "soft-prompt"))
    return RunConfig(**{**base, **kw})


def lm_evals_own(folder, task_metrics: dict) -> dict:
    """lm-eval's Group.aggregate of the group over ``task_metrics`` (its own group object, built by it)."""
    group = manager(str(folder), defaults=False).load(GROUP)["groups"][GROUP]
    return group.aggregate(task_metrics)


@pytest.mark.parametrize("weighted", [True, False])
def test_a_group_runs_each_subtask_and_scores_as_lm_eval_aggregates(tmp_path, weighted):
    folder = write_group(tmp_path / f"yamls{weighted}", weighted=weighted)
    out = tmp_path / "runs"
    record, per_task = run_group(config(out, folder), lm=tiny_lm(seed=3))
    assert record["tasks"] == [MC, MC2] and [len(rs) for rs in per_task] == [2, 2]
    assert [r["task"] for rs in per_task for r in rs] == [f"lm-eval:{MC}"] * 2 + [f"lm-eval:{MC2}"] * 2
    assert read_groups(out) == [json.loads(json.dumps(record))]
    sizes = {f"lm-eval:{MC}": 8, f"lm-eval:{MC2}": 4}
    rows = group_scores([r for rs in per_task for r in rs], [record])
    assert [(row.group, row.method, row.tasks, row.total, row.sample_len) for row in rows] == [
        (GROUP, "zero-shot", 2, 2, 12), (GROUP, "soft-prompt", 2, 2, 12)]
    for row, method in zip(rows, ("zero-shot", "soft-prompt")):
        runs = [r for rs in per_task for r in rs if r["method"] == method]
        task_metrics = {r["task"].split(":")[1]: {**r["metrics"]["lm_eval"]["metrics"], "sample_len": r["n"]}
                        for r in runs}
        own = lm_evals_own(folder, task_metrics)
        for key in ("acc,none", "acc_stderr,none", "acc_norm,none", "acc_norm_stderr,none"):
            assert row.scores[key] == pytest.approx(own[key])
        cloze = [r["metrics"]["cloze_accuracy"]["value"] for r in runs]
        expected = (sum(c * sizes[r["task"]] for c, r in zip(cloze, runs)) / 12 if weighted else sum(cloze) / 2)
        assert row.scores["acc,none"] == pytest.approx(expected)
    found, _ = load_runs(out)  # compare and report read the same from the folders
    assert [(row.method, row.scores) for row in group_scores([r.results for r in found], read_groups(out))] == [
        (row.method, row.scores) for row in rows]


def test_a_subtask_run_alone_is_the_same_run_as_in_its_group(tmp_path):
    folder = write_group(tmp_path / "yamls")
    out = tmp_path / "runs"
    alone = run_job(config(out, folder, task=f"lm-eval:{MC}", methods=("zero-shot",)), lm=tiny_lm(seed=3))
    _record, per_task = run_group(config(out, folder, methods=("zero-shot",)), lm=tiny_lm(seed=3))
    assert per_task[0][0]["finished_at"] == alone[0]["finished_at"]  # found finished, not run again


def test_a_group_is_checked_whole_before_the_model_loads(tmp_path):
    folder = write_group(tmp_path / "yamls")
    with pytest.raises(UserError, match=f"of lm-eval:{MC2}"):  # toy_mc2 scores 4 items, toy_mc 8
        run_group(config(tmp_path / "runs", folder, model="smollm2-135m-instruct", limit=6))
    assert not (tmp_path / "runs").exists()


def test_compare_and_report_show_the_groups_score(tmp_path, capsys):
    from softeval.analysis.report import build_report
    from softeval.cli.app import main

    folder = write_group(tmp_path / "yamls")
    out = tmp_path / "runs"
    record, per_task = run_group(config(out, folder), lm=tiny_lm(seed=3))
    rows = group_scores([r for rs in per_task for r in rs], [record])
    assert main(["compare", str(out), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["lm_eval_groups"]
    assert [(g["group"], g["method"], g["scores"]["acc,none"]) for g in shown] == [
        (GROUP, row.method, pytest.approx(row.scores["acc,none"])) for row in rows]
    assert main(["compare", str(out)]) == 0
    assert "lm-eval groups" in capsys.readouterr().out
    page = build_report(out, tmp_path / "report.html").read_text()
    assert "lm-eval groups" in page and f"toy colours ({GROUP})" in page
    assert f"acc,none {rows[0].scores['acc,none']:.4f}" in page
