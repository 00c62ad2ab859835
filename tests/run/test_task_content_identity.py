"""A changed task file, data file or --source file never reuses a finished run's numbers (the
hostile probe's reproduction, on a tiny model): an edited data row, a changed prompt and the same relative --task in two
folders each refuse with the difference named (or rerun with --force); a run recorded before the digests
existed counts as a run of other settings."""

from __future__ import annotations

import dataclasses
import json

import pytest
from tiny import tiny_lm
from userfiles import GOOD_SPEC, ROWS, write_spec

from softeval.run.config import RunConfig
from softeval.run.pipeline import run_job
from softeval.store.runs import OtherSettings


def _run(task, out, **kw):
    config = RunConfig(model="tiny-0", task=str(task), methods=("zero-shot",), limit=2, eval_batch_size=2,
                       curve_items=0, batch_size=2, out=str(out), device="cpu", **kw)
    return run_job(config, lm=tiny_lm())[0]


def _edit_row(folder):
    rows = folder / "rows.jsonl"
    rows.write_text(rows.read_text().replace('"K5"', '"Paris"'))


def _edit_prompt(folder):
    path = folder / "t.yaml"
    path.write_text(path.read_text().replace("Country:", "Which country:"))


@pytest.mark.parametrize("edit", [_edit_row, _edit_prompt])
def test_an_edited_task_file_or_data_row_is_refused_then_rerun_with_force(tmp_path, edit):
    task = write_spec(tmp_path, GOOD_SPEC)
    first = _run(task, tmp_path / "coll")
    assert len(first["config"]["task_sha256"]) == 64 and "source_sha256" not in first["config"]
    assert _run(task, tmp_path / "coll")["started_at"] == first["started_at"]  # unchanged: skipped
    edit(tmp_path)
    with pytest.raises(OtherSettings, match="task_sha256: the contents differ"):
        _run(task, tmp_path / "coll")
    again = _run(task, tmp_path / "coll", force=True)
    assert again["config"]["task_sha256"] != first["config"]["task_sha256"]


def test_the_same_relative_task_file_in_two_folders_is_two_runs(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        write_spec(folder, GOOD_SPEC)
    _edit_prompt(b)
    monkeypatch.chdir(a)
    _run("t.yaml", tmp_path / "coll")
    monkeypatch.chdir(b)
    with pytest.raises(OtherSettings, match="task_sha256"):
        _run("t.yaml", tmp_path / "coll")


def test_an_edited_source_file_is_refused(tmp_path):
    task = write_spec(tmp_path, GOOD_SPEC)
    source = tmp_path / "other.jsonl"
    source.write_text("".join(json.dumps({**r, "capital": r["capital"] + "x"}) + "\n" for r in ROWS))
    first = _run(task, tmp_path / "coll", source=str(source))
    assert len(first["config"]["source_sha256"]) == 64
    source.write_text(source.read_text().replace('"K2x"', '"Rome"'))
    with pytest.raises(OtherSettings, match="source_sha256: the contents differ"):
        _run(task, tmp_path / "coll", source=str(source))


def test_a_run_recorded_before_the_digests_is_a_run_of_other_settings(tmp_path):
    task = write_spec(tmp_path, GOOD_SPEC)
    first = _run(task, tmp_path / "coll")
    (results,) = (tmp_path / "coll").rglob("results.json")
    old = json.loads(results.read_text())
    del old["config"]["task_sha256"]  # as written before this change
    results.write_text(json.dumps(old, indent=2))
    with pytest.raises(OtherSettings, match="task_sha256: not recorded -> '"):
        _run(task, tmp_path / "coll")
    forced = _run(task, tmp_path / "coll", force=True)
    assert forced["config"]["task_sha256"] == first["config"]["task_sha256"]
    assert "task_sha256" in json.loads(results.read_text())["config"]


def test_a_built_in_task_revision_is_part_of_the_identity_from_2_on(tmp_path, monkeypatch):
    """gsm8k's definition changed (revision 2: its stops and answer line; 3: lm-eval's reading of it; 4: where
    generation ends); its runs record that, a run recorded without it (revision 1, written before) is a run of
    other settings, and a later revision refuses this one."""
    from softeval.tasks import TASKS

    now = TASKS["gsm8k"].revision
    assert now == 4 and "task_revision" not in RunConfig(model="m", task="mmlu").options("zero-shot")  # 1: as before
    first = _run("gsm8k", tmp_path / "coll")
    assert first["config"]["task_revision"] == now
    (results,) = (tmp_path / "coll").rglob("results.json")
    monkeypatch.setitem(TASKS, "gsm8k", dataclasses.replace(TASKS["gsm8k"], revision=now + 1))
    with pytest.raises(OtherSettings, match=f"task_revision: {now} -> {now + 1}"):
        _run("gsm8k", tmp_path / "coll")
    monkeypatch.undo()
    old = json.loads(results.read_text())
    del old["config"]["task_revision"]  # as written before revisions existed
    results.write_text(json.dumps(old, indent=2))
    with pytest.raises(OtherSettings, match=f"task_revision: not recorded -> {now}"):
        _run("gsm8k", tmp_path / "coll")
