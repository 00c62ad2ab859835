"""The runs index: upserts, concurrent writers in separate processes, rebuilding from folders."""

from __future__ import annotations

import json
import multiprocessing as mp
import sqlite3
from pathlib import Path

import pytest
from runfactory import Extras, outcomes, write_run

from softeval.store import index
from softeval.store.format import INDEX_FILE, RunFormatError

WRITES_PER_PROCESS = 15


def test_record_run_is_an_idempotent_upsert(tmp_path: Path) -> None:
    run = write_run(tmp_path, "org/model-a", "mmlu", "zero-shot", outcomes(20, 0.4))
    index.record_run(tmp_path, run)
    index.record_run(tmp_path, run)
    rows = index.list_runs(tmp_path)
    assert len(rows) == 1
    row = rows[0]
    assert row["path"] == "org--model-a/mmlu/zero-shot/seed0"
    assert (row["model"], row["task"], row["method"], row["seed"], row["n"]) == (
        "org/model-a", "mmlu", "zero-shot", 0, 20)
    assert row["accuracy"] == pytest.approx(0.4)
    assert row["metrics"]["format_rate"]["value"] == 1.0
    conn = sqlite3.connect(tmp_path / INDEX_FILE)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_record_run_refuses_a_partial_folder(tmp_path: Path) -> None:
    run = write_run(tmp_path, "m", "mmlu", "zero-shot", outcomes(5, 0.4), extras=Extras(partial=True))
    with pytest.raises(RunFormatError, match="partial"):
        index.record_run(tmp_path, run)


def _writer(out: str, who: int, start: mp.synchronize.Event) -> None:
    start.wait(10)
    for k in range(WRITES_PER_PROCESS):
        index.record_run(Path(out), Path(out) / f"model-{who}" / "mmlu" / "zero-shot" / f"seed{k}")


def test_two_processes_writing_at_once_both_land(tmp_path: Path) -> None:
    for who in (0, 1):
        for k in range(WRITES_PER_PROCESS):
            write_run(tmp_path, f"model-{who}", "mmlu", "zero-shot", outcomes(10, 0.5), seed=k)
    # No index exists yet, so the two processes also race to create the database and switch it to WAL.
    assert not (tmp_path / INDEX_FILE).exists()
    ctx = mp.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), who, start)) for who in (0, 1)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    rows = index.list_runs(tmp_path)
    assert sorted((r["model"], r["seed"]) for r in rows) == sorted(
        (f"model-{who}", k) for who in (0, 1) for k in range(WRITES_PER_PROCESS))
    conn = sqlite3.connect(tmp_path / INDEX_FILE)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def test_rebuild_skips_half_written_and_foreign_folders_and_says_which(tmp_path: Path) -> None:
    good = write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    partial = write_run(tmp_path, "model-a", "mmlu", "soft-prompt", outcomes(10, 0.5), extras=Extras(partial=True))
    torn = write_run(tmp_path, "model-a", "mmlu", "few-shot", outcomes(10, 0.5), seed=1)
    text = (torn / "results.json").read_text()
    (torn / "results.json").write_text(text[: len(text) // 2])
    wrong = write_run(tmp_path, "model-b", "gsm8k", "zero-shot", outcomes(10, 0.5))
    data = json.loads((wrong / "results.json").read_text())
    data["task"] = "mmlu"
    (wrong / "results.json").write_text(json.dumps(data))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("not a run")
    (tmp_path / "other" / "x" / "y" / "seedling").mkdir(parents=True)
    (tmp_path / "README.md").write_text("hello")
    index.record_run(tmp_path, good)

    report = index.rebuild(tmp_path)

    assert report.indexed == [good]
    reasons = {p.relative_to(tmp_path).as_posix(): why for p, why in report.skipped}
    assert "partial" in reasons["model-a/mmlu/soft-prompt/seed0.partial"]
    assert "not valid JSON" in reasons["model-a/mmlu/few-shot/seed1"]
    assert "task" in reasons["model-b/gsm8k/zero-shot/seed0"]
    assert "not a run folder" in reasons["notes"]
    assert "not a run folder" in reasons["other/x/y/seedling"]
    assert "README.md" in reasons
    assert len(reasons) == 6
    assert [r["path"] for r in index.list_runs(tmp_path)] == ["model-a/mmlu/zero-shot/seed0"]
    assert partial.exists()  # skipping never deletes anything


def test_rebuild_drops_runs_whose_folders_are_gone(tmp_path: Path) -> None:
    a = write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    b = write_run(tmp_path, "model-b", "mmlu", "zero-shot", outcomes(10, 0.3))
    index.record_run(tmp_path, a)
    index.record_run(tmp_path, b)
    (b / "results.json").unlink()
    report = index.rebuild(tmp_path)
    assert [r["model"] for r in index.list_runs(tmp_path)] == ["model-a"]
    assert report.skipped == [(b, "no results.json")]


def test_list_runs_builds_a_missing_index_from_the_folders(tmp_path: Path) -> None:
    write_run(tmp_path, "model-a", "mmlu", "few-shot", outcomes(10, 0.5))
    assert [r["method"] for r in index.list_runs(tmp_path)] == ["few-shot"]


def test_cli_runs_rebuild_json_lists_runs_and_reports_skips_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from softeval.cli import analysis as cli_analysis

    write_run(tmp_path, "model-a", "mmlu", "soft-prompt", outcomes(10, 0.5))
    write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5), extras=Extras(partial=True))
    parser = argparse.ArgumentParser()
    cli_analysis.register(parser.add_subparsers())
    args = parser.parse_args(["runs", str(tmp_path), "--rebuild", "--json"])
    assert args.handler(args) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    assert [(r["model"], r["method"]) for r in rows] == [("model-a", "soft-prompt")]
    assert "seed0.partial" in captured.err and "skipped" in captured.err


def test_a_task_name_slugged_into_its_folder_name_is_accepted(tmp_path: Path) -> None:
    run = write_run(tmp_path, "model-a", "my tasks/qa", "zero-shot", outcomes(4, 0.5))
    final = run.parent.parent.parent / "my--tasks--qa" / "zero-shot" / "seed0"
    final.parent.mkdir(parents=True)
    run.rename(final)
    index.record_run(tmp_path, final)
    assert [r["task"] for r in index.list_runs(tmp_path)] == ["my tasks/qa"]


def test_runs_show_the_top_answer(tmp_path: Path, capsys, monkeypatch) -> None:
    import argparse

    from softeval.cli import analysis as cli_analysis

    # 10 items, gold cycles ABCD; all wrong -> strict answer is the next letter: B 3, C 3, D 2, A 2
    run = write_run(tmp_path, "model-a", "mmlu", "soft-prompt", [False] * 10)
    index.record_run(tmp_path, run)
    assert index.list_runs(tmp_path)[0]["top_answer"] == "B 3/10"
    monkeypatch.setenv("COLUMNS", "200")  # one line per row
    parser = argparse.ArgumentParser()
    cli_analysis.register(parser.add_subparsers())
    args = parser.parse_args(["runs", str(tmp_path)])
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "top answer" in out and "B 3/10" in out
