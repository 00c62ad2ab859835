"""The runs index: upserts, concurrent writers in separate processes, rebuilding from folders."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runfactory import Extras, outcomes, write_run

from softeval.store import index
from softeval.store.format import INDEX_FILE, RunFormatError, scan

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


def _edit(run: Path) -> None:
    """A hand edit of results.json that its samples no longer back (the digest check finds it)."""
    data = json.loads((run / "results.json").read_text())
    data["metrics"]["accuracy"]["value"] = 0.99
    (run / "results.json").write_text(json.dumps(data))


def _truncate(run: Path) -> None:
    text = (run / "results.json").read_text()
    (run / "results.json").write_text(text[: len(text) // 2])


def _unfinished(run: Path) -> None:
    """A seed folder holding its config but no results.json: not a finished run (a `.partial` is one running)."""
    (run / "config.json").write_text("{}")
    (run / "results.json").unlink()


DAMAGE = {"edited": (_edit, "metrics.accuracy.value is 0.99"), "truncated": (_truncate, "not valid JSON"),
          "unfinished": (_unfinished, "no results.json")}


def _listing(out: Path) -> tuple[list[str], list[tuple[Path, str]]]:
    seen: list[tuple[Path, str]] = []
    return [r["model"] for r in index.list_runs(out, on_skip=lambda p, why: seen.append((p, why)))], seen


@pytest.mark.parametrize("damage", DAMAGE)
def test_every_listing_names_a_damaged_run_not_only_the_one_that_builds_the_index(tmp_path, damage, monkeypatch):
    write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    bad = write_run(tmp_path, "model-b", "mmlu", "zero-shot", outcomes(10, 0.5))
    harm, said = DAMAGE[damage]
    harm(bad)
    assert not (tmp_path / INDEX_FILE).exists()
    first = _listing(tmp_path)  # builds the index
    assert first[0] == ["model-a"] and [p for p, _ in first[1]] == [bad] and said in first[1][0][1]
    # later listings name it with the same reason, remembered by the index: the folder is not read again
    monkeypatch.setattr(index, "check_run", lambda *a, **k: pytest.fail("an unchanged folder was read again"))
    assert _listing(tmp_path) == first
    assert _listing(tmp_path) == first


def test_a_run_damaged_after_it_was_indexed_is_named_on_every_later_listing(tmp_path):
    write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    bad = write_run(tmp_path, "model-b", "mmlu", "zero-shot", outcomes(10, 0.5))
    assert _listing(tmp_path) == (["model-a", "model-b"], [])
    _edit(bad)
    runs, seen = _listing(tmp_path)  # finds the change
    assert runs == ["model-a"] and [p for p, _ in seen] == [bad] and "0.99" in seen[0][1]
    assert _listing(tmp_path) == (runs, seen)  # and so does the next one


def test_a_skipped_folder_that_changes_is_checked_again_and_a_repaired_one_is_listed(tmp_path):
    good = write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    original = (good / "results.json").read_text()
    _edit(good)
    assert "0.99" in _listing(tmp_path)[1][0][1]
    _truncate(good)
    assert "not valid JSON" in _listing(tmp_path)[1][0][1]
    (good / "results.json").write_text(original)
    assert _listing(tmp_path) == (["model-a"], [])
    with closing(sqlite3.connect(tmp_path / INDEX_FILE)) as conn:  # forgotten once it is no longer skipped
        assert conn.execute("SELECT count(*) FROM skipped").fetchone()[0] == 0


def test_a_listing_names_folders_that_appeared_after_the_index_was_built(tmp_path):
    write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    assert _listing(tmp_path) == (["model-a"], [])
    partial = write_run(tmp_path, "model-a", "mmlu", "soft-prompt", outcomes(10, 0.5), extras=Extras(partial=True))
    bad = write_run(tmp_path, "model-b", "mmlu", "zero-shot", outcomes(10, 0.5))
    _truncate(bad)
    write_run(tmp_path, "model-c", "mmlu", "zero-shot", outcomes(10, 0.5))  # finished, never indexed
    runs, seen = _listing(tmp_path)
    assert runs == ["model-a", "model-c"] and [p for p, _ in seen] == [partial, bad]
    assert "partial" in seen[0][1] and "not valid JSON" in seen[1][1]
    shutil.rmtree(partial)  # the run finished or was removed: no longer named
    assert _listing(tmp_path) == (runs, seen[1:])


def test_a_read_only_root_names_its_skipped_folders_from_the_index(tmp_path, monkeypatch):
    write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    bad = write_run(tmp_path, "model-b", "mmlu", "zero-shot", outcomes(10, 0.5))
    _edit(bad)
    first = _listing(tmp_path)
    monkeypatch.setattr(index, "write_refusal", lambda folder: "read-only file system")
    assert _listing(tmp_path) == first
    (tmp_path / INDEX_FILE).unlink()  # no index: the folders, read as a scan reads them
    assert _listing(tmp_path) == first


SLOTS = ("model-a", "model-b")
STEPS = ("good", "edited", "truncated", "unfinished", "partial", "removed")


def _put(out: Path, model: str, step: str) -> None:
    """The slot's folders as ``step`` leaves them: a finished run, one damaged a way, a run in progress, none."""
    for folder in (out / model).glob("mmlu/zero-shot/seed0*"):
        shutil.rmtree(folder)
    if step == "removed":
        return
    run = write_run(out, model, "mmlu", "zero-shot", outcomes(6, 0.5), extras=Extras(partial=step == "partial"))
    if step in DAMAGE:
        DAMAGE[step][0](run)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(SLOTS), st.sampled_from(STEPS)), min_size=1, max_size=6))
def test_every_listing_agrees_with_a_scan_of_the_folders(tmp_path_factory, steps):
    """Whatever happened to the folders since the index was built, a listing lists the runs a scan finds and
    names the folders it skips, with the same reasons (besides an indexed run whose folder is gone: named once)."""
    out = tmp_path_factory.mktemp("runs")
    index.list_runs(out)
    for when, (model, step) in enumerate(steps, 1):
        _put(out, model, step)
        for path in (out / model).rglob("*"):  # each step a second after the last: a stamp sees what it changed
            os.utime(path, ns=(when * 10**9, when * 10**9))
        seen: list[tuple[Path, str]] = []
        listed = index.list_runs(out, on_skip=lambda p, why: seen.append((p, why)))
        found = scan(out)
        assert [r["path"] for r in listed] == [r.rel for r in found.runs]
        assert [s for s in seen if s[0].exists()] == found.skipped
        assert all(why == "no results.json" for p, why in seen if not p.exists())
