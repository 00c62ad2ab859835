"""Damaged files: a random-bytes index, torn or short samples.jsonl, a damaged results.json after
indexing, a damaged finished run met by `softeval run`. Each is detected, named, and recoverable."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest
from runfactory import Extras, demo_runs, outcomes, write_run

from softeval import cli
from softeval.errors import UserError
from softeval.store import index
from softeval.store.format import INDEX_FILE, scan


def _runs(argv: list[str], capsys) -> tuple[int, str, str]:
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _damage_index(out: Path) -> bytes:
    for extra in ("-wal", "-shm"):
        Path(f"{out / INDEX_FILE}{extra}").unlink(missing_ok=True)
    junk = os.urandom(4096)
    (out / INDEX_FILE).write_bytes(junk)
    return junk


def test_random_bytes_index_says_what_to_do_and_rebuild_keeps_it_aside(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    index.rebuild(tmp_path)
    junk = _damage_index(tmp_path)
    code, out, err = _runs(["runs", str(tmp_path)], capsys)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "damaged" in err and f"softeval runs {tmp_path} --rebuild" in err
    code, out, err = _runs(["runs", str(tmp_path), "--rebuild"], capsys)
    assert code == 0 and "model-a" in out
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(INDEX_FILE + ".damaged")]
    assert len(aside) == 1 and aside[0].read_bytes() == junk and "kept the damaged index as" in out + err
    code, out, _ = _runs(["runs", str(tmp_path)], capsys)
    assert code == 0 and "model-a" in out


def test_run_warning_about_the_index_points_to_a_command_that_works(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    from tiny import format_task, tiny_lm

    from softeval import tasks
    from softeval.run.config import RunConfig
    from softeval.run.pipeline import run_job

    monkeypatch.setitem(tasks.TASKS, "toyformat", format_task())
    cfg = RunConfig(model="tiny-0", task="toyformat", methods=("zero-shot",), limit=4, out=str(tmp_path / "o"),
                    eval_batch_size=4, curve_items=4)
    run_job(cfg, lm=tiny_lm())
    _damage_index(tmp_path / "o")
    run_job(RunConfig(**{**cfg.__dict__, "methods": ("few-shot",), "shots": 1}), lm=tiny_lm())
    err = capsys.readouterr().err
    command = err[err.index("`softeval ") + 1:err.index("`", err.index("`softeval ") + 1)]
    assert command.endswith("--rebuild")
    code, out, _ = _runs(shlex.split(command)[1:], capsys)
    assert code == 0 and "few-shot" in out and "zero-shot" in out


def _tear(run: Path, how: str) -> None:
    path = run / "samples.jsonl"
    text = path.read_text()
    if how == "torn":  # cut in the middle of a line
        path.write_text(text[: len(text) // 2])
    else:  # whole rows cut: still valid JSON lines
        path.write_text("".join(text.splitlines(keepends=True)[:-3]))


@pytest.mark.parametrize("how", ["torn", "short"])
def test_damaged_samples_are_skipped_by_runs_compare_and_report_by_name(tmp_path, capsys, how, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    pairs = demo_runs(tmp_path)
    damaged = tmp_path / "base-1" / "mmlu" / "zero-shot" / "seed0"
    _tear(damaged, how)
    code, out, err = _runs(["runs", str(tmp_path)], capsys)
    assert code == 0 and f"skipped {damaged}: samples.jsonl" in out + err
    assert all(r["path"] != "base-1/mmlu/zero-shot/seed0" for r in index.list_runs(tmp_path))
    args = ["compare", str(tmp_path), "--n-boot", "50", *[f"--pair={b}={p}" for b, p in pairs]]
    code, out, err = _runs(args, capsys)
    assert code == 0 and "Traceback" not in err
    assert f"skipped {damaged}" in out and "samples.jsonl" in out
    code, out, err = _runs(["report", str(tmp_path), "-o", str(tmp_path / "r.html"), "--n-boot", "50"], capsys)
    assert code == 0
    page = (tmp_path / "r.html").read_text()
    assert "base-1/mmlu/zero-shot/seed0" in page and "samples.jsonl" in page


def test_stale_index_does_not_show_a_run_whose_results_were_damaged(tmp_path, capsys):
    a = write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    write_run(tmp_path, "model-b", "mmlu", "zero-shot", outcomes(10, 0.5))
    assert len(index.list_runs(tmp_path)) == 2
    text = (a / "results.json").read_text()
    (a / "results.json").write_text(text[:40])
    seen = []
    assert [r["model"] for r in index.list_runs(tmp_path, on_skip=lambda p, why: seen.append((p, why)))] == ["model-b"]
    assert seen and seen[0][0] == a and "not valid JSON" in seen[0][1]


def test_softeval_run_treats_a_damaged_finished_run_as_unfinished(tmp_path, capsys, monkeypatch):
    from tiny import format_task, tiny_lm

    from softeval import tasks
    from softeval.run.config import RunConfig
    from softeval.run.pipeline import run_job

    monkeypatch.setitem(tasks.TASKS, "toyformat", format_task())
    cfg = RunConfig(model="tiny-0", task="toyformat", methods=("zero-shot",), limit=6, out=str(tmp_path),
                    eval_batch_size=3, curve_items=4)
    first = run_job(cfg, lm=tiny_lm())[0]
    run = tmp_path / "tiny-0/toyformat/zero-shot/seed0"
    before = (run / "samples.jsonl").read_text()
    _tear(run, "short")
    capsys.readouterr()
    again = run_job(cfg, lm=tiny_lm())[0]
    err = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert "damaged" in err and "scoring it again" in err
    assert again["metrics"] == first["metrics"]  # scored again (the old folder is aside, below)
    assert (run / "samples.jsonl").read_text() == before
    aside = [p for p in run.parent.iterdir() if p.name.startswith(".seed0.damaged")]
    assert len(aside) == 1 and (aside[0] / "results.json").exists()
    assert [r["path"] for r in index.list_runs(tmp_path)] == ["tiny-0/toyformat/zero-shot/seed0"]


def test_the_sweeps_finished_check_changes_nothing(tmp_path, monkeypatch):
    """pipeline.is_finished (the sweep driver's and workers' check, taken without the run lock) must
    not move a damaged run aside or delete anything: the process holding the lock does that."""
    from tiny import format_task, tiny_lm

    from softeval import tasks
    from softeval.errors import UserError
    from softeval.run.config import RunConfig
    from softeval.run.pipeline import is_finished, run_job

    monkeypatch.setitem(tasks.TASKS, "toyformat", format_task())
    cfg = RunConfig(model="tiny-0", task="toyformat", methods=("zero-shot",), limit=4, out=str(tmp_path),
                    eval_batch_size=4, curve_items=4)
    assert not is_finished(cfg, "zero-shot")
    run_job(cfg, lm=tiny_lm())
    run = tmp_path / "tiny-0/toyformat/zero-shot/seed0"
    assert is_finished(cfg, "zero-shot")
    with pytest.raises(UserError, match="other settings"):
        is_finished(RunConfig(**{**cfg.__dict__, "kind": "base"}), "zero-shot")
    _tear(run, "short")
    before = sorted(p.name for p in run.parent.iterdir())
    assert not is_finished(cfg, "zero-shot")
    assert sorted(p.name for p in run.parent.iterdir()) == before and (run / "results.json").exists()


def test_an_emptied_index_is_rebuilt_from_the_folders_not_listed_as_no_runs(tmp_path, capsys, monkeypatch):
    """A 0-byte index.sqlite (a truncated file) is a valid empty database to SQLite: `softeval runs`
    must not answer '0 finished runs' while the folders hold runs."""
    monkeypatch.setenv("COLUMNS", "300")
    write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    index.rebuild(tmp_path)
    for extra in ("-wal", "-shm"):
        Path(f"{tmp_path / INDEX_FILE}{extra}").unlink(missing_ok=True)
    (tmp_path / INDEX_FILE).write_bytes(b"")
    code, out, err = _runs(["runs", str(tmp_path)], capsys)
    assert code == 0 and "model-a" in out and "1 finished runs" in out


@pytest.mark.parametrize("meta", [b"", b"[1]", b'"model"', b"\xff\xfe not utf-8",
                                  b'{"format_version": 1, "init": 5}'])
def test_a_damaged_softeval_json_beside_a_soft_prompt_is_metadata_only(tmp_path, meta):
    """softeval.json is softeval's note beside PEFT's adapter (how it was initialised, what it was
    tuned on): the weights are what is scored, so a damaged note is read as absent, not a traceback."""
    import torch
    from tiny import tiny_lm

    from softeval.lm.softprompt import SOFTEVAL_META, SoftPrompt, init_record

    lm = tiny_lm()
    saved = SoftPrompt.initialise(lm, 4, "text:abc", seed=0)
    saved.save(tmp_path, lm, {"task": "t", "seed": 0})
    (tmp_path / SOFTEVAL_META).write_bytes(meta)
    loaded = SoftPrompt.load(tmp_path, lm)
    torch.testing.assert_close(loaded.weight, saved.weight, rtol=0, atol=0)
    assert loaded.init == "vocab"
    record = init_record(f"from:{tmp_path}")
    assert set(record) == {"path", "sha256"}


@pytest.mark.parametrize("bad", [b"5", b"[]", b"null", b"\xff\xfe{}", b'{"i": 1, "id": "b", "output": 5}',
                                 b'{"i": 1, "id": "b", "output": "x", "hit_limit": "yes"}'])
def test_a_damaged_outputs_jsonl_line_is_scored_again_not_a_traceback(tmp_path, bad):
    """outputs.jsonl (the resume state of an interrupted run's scoring): a damaged line's item is
    scored again; every well-formed row of the right item is kept, after the damage too (a killed
    append leaves a torn line that the next process's rows follow)."""
    from softeval.run.pipeline import _load_done

    good = {"i": 0, "id": "a", "output": "#a", "hit_limit": False}
    later = {"i": 2, "id": "c", "output": "#c", "hit_limit": False}
    path = tmp_path / "outputs.jsonl"
    path.write_bytes(json.dumps(good).encode() + b"\n" + bad + b"\n" + json.dumps(later).encode() + b"\n")
    assert _load_done(path, ["a", "b", "c"]) == {0: good, 2: later}


@pytest.mark.parametrize("damage", [b'{"step": 1, "lo', b"\xff\xfe\n", b"5\n", b'{"step": "x", "loss": 1.0}\n',
                                    b'{"step": 1, "loss": "high"}\n'])
def test_a_damaged_curve_is_left_out_of_the_report_by_name(tmp_path, capsys, damage):
    """curve.jsonl is no input to any metric (results.json's checksum covers samples.jsonl only): the
    report draws the other curves and names the damaged one, instead of a traceback."""
    from runfactory import demo_curve

    bad = write_run(tmp_path, "model-a", "mmlu", "soft-prompt", outcomes(10, 0.5), extras=Extras(curve=demo_curve()))
    write_run(tmp_path, "model-b", "mmlu", "soft-prompt", outcomes(10, 0.5), extras=Extras(curve=demo_curve()))
    (bad / "curve.jsonl").write_bytes(damage)
    code, out, err = _runs(["report", str(tmp_path), "-o", str(tmp_path / "r.html"), "--n-boot", "50"], capsys)
    assert code == 0 and "Traceback" not in err
    page = (tmp_path / "r.html").read_text()
    assert "model-a/mmlu/soft-prompt/seed0/curve.jsonl is damaged" in page
    assert "learning curves of the tuned methods" in page


@pytest.mark.parametrize("n", ["x", None, -1, True, 2.5])
def test_a_results_json_whose_n_is_not_a_count_is_skipped_by_name(tmp_path, capsys, n):
    run = write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    results = json.loads((run / "results.json").read_text())
    (run / "results.json").write_text(json.dumps({**results, "n": n}))
    assert scan(tmp_path).skipped == [(run, "results.json 'n' is not a count of items")]
    code, out, err = _runs(["report", str(tmp_path), "-o", str(tmp_path / "r.html"), "--n-boot", "50"], capsys)
    assert code == 0 and "Traceback" not in err


@pytest.mark.parametrize("where", ["folder", "below-a-file"])
def test_report_output_that_cannot_be_a_file_is_one_line(tmp_path, capsys, where):
    write_run(tmp_path / "runs", "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    (tmp_path / "afile").write_text("x")
    output = tmp_path / "runs" if where == "folder" else tmp_path / "afile" / "r.html"
    code, out, err = _runs(["report", str(tmp_path / "runs"), "-o", str(output)], capsys)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"-o {output}" in err and (tmp_path / "afile").read_text() == "x"


def test_an_index_path_that_is_a_folder_says_how_to_rebuild(tmp_path, capsys):
    write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    (tmp_path / INDEX_FILE).mkdir()
    code, out, err = _runs(["runs", str(tmp_path)], capsys)
    assert code == 2 and "Traceback" not in err and f"softeval runs {tmp_path} --rebuild" in err
    code, out, err = _runs(["runs", str(tmp_path), "--rebuild"], capsys)
    assert code == 0 and "model-a" in out


@pytest.mark.parametrize("n_boot", ["-1", "1", "49"])
@pytest.mark.parametrize("command", ["compare", "report"])
def test_a_bootstrap_of_too_few_replicates_is_one_line(tmp_path, capsys, command, n_boot):
    # --n-boot 1 used to print a conclusion with no interval (one replicate has no percentiles).
    pairs = demo_runs(tmp_path)
    args = [command, str(tmp_path), "--n-boot", n_boot, *[f"--pair={b}={p}" for b, p in pairs]]
    code, out, err = _runs(args + (["-o", str(tmp_path / "r.html")] if command == "report" else []), capsys)
    assert code == 2 and "Traceback" not in err and "--n-boot must be at least 50" in err and f"not {n_boot}" in err


READER_DAMAGE = {
    "edited": (lambda run: _edit_results(run), "results.json says metrics.accuracy.value is 0.99"),
    "truncated": (lambda run: _cut_results(run), "results.json is not valid JSON"),
    # a seed folder with its config but no results.json: unfinished (a run in progress is a .partial folder)
    "unfinished": (lambda run: ((run / "config.json").write_text("{}"), (run / "results.json").unlink()),
                   "no results.json"),
}


def _edit_results(run: Path) -> None:
    results = json.loads((run / "results.json").read_text())
    results["metrics"]["accuracy"]["value"] = 0.99
    (run / "results.json").write_text(json.dumps(results))


def _cut_results(run: Path) -> None:
    text = (run / "results.json").read_text()
    (run / "results.json").write_text(text[: len(text) // 2])


@pytest.mark.parametrize("damage", READER_DAMAGE)
def test_the_only_run_damaged_before_any_index_is_named_by_every_reader(tmp_path, capsys, monkeypatch, damage):
    """The issue's case: a root whose only results.json was edited by hand, no index yet. `report` wrote
    "0 runs", exit 0, naming it nowhere; a second `runs` listing was silent. Every reader names it, with why."""
    monkeypatch.setenv("COLUMNS", "400")
    root = tmp_path / "runs"
    run = write_run(root, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    harm, why = READER_DAMAGE[damage]
    harm(run)
    line = f"skipped {run}: {why}"
    code, out, err = _runs(["report", str(root), "-o", str(tmp_path / "r.html")], capsys)
    assert code == 0 and line in out and "1 skipped" in out
    page = (tmp_path / "r.html").read_text()
    section = page[page.index('<h2 id="skipped">'):page.index("</table>", page.index('<h2 id="skipped">'))]
    assert "<th>run folder</th>" in section and "<code>model-a/mmlu/zero-shot/seed0</code>" in section
    assert why in section
    for _ in range(3):  # the listing that builds the index, and the later ones
        code, out, err = _runs(["runs", str(root)], capsys)
        assert code == 0 and line in out and "0 finished runs" in out and "1 skipped" in out
    code, out, err = _runs(["runs", str(root), "--json"], capsys)
    assert code == 0 and json.loads(out) == [] and err.count(line) == 1
    code, out, err = _runs(["compare", str(root)], capsys)  # nothing left to compare, and it says what it left
    assert code == 2 and line in out and "nothing to compare" in err
    code, out, err = _runs(["compare", str(root), "--json"], capsys)
    [skipped] = json.loads(out)["skipped_folders"]
    assert skipped["path"] == str(run) and why in skipped["reason"]


@pytest.mark.parametrize("damage", READER_DAMAGE)
def test_a_damaged_run_beside_good_ones_is_named_by_runs_compare_report_and_the_api(tmp_path, capsys, monkeypatch,
                                                                                     damage):
    pytest.importorskip("pandas")
    from softeval.results import SkippedRunWarning, compare, load_runs, load_samples

    monkeypatch.setenv("COLUMNS", "400")
    root = tmp_path / "runs"
    write_run(root, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    write_run(root, "model-a", "mmlu", "soft-prompt", outcomes(10, 0.7))
    run = write_run(root, "model-b", "mmlu", "zero-shot", outcomes(10, 0.4))
    assert len(index.list_runs(root)) == 3  # indexed while intact
    harm, why = READER_DAMAGE[damage]
    harm(run)
    line = f"skipped {run}: {why}"
    for _ in range(2):
        code, out, _ = _runs(["runs", str(root)], capsys)
        assert code == 0 and line in out and "2 finished runs" in out
    code, out, _ = _runs(["compare", str(root)], capsys)
    assert code == 0 and line in out
    code, out, _ = _runs(["report", str(root), "-o", str(tmp_path / "r.html")], capsys)
    assert code == 0 and line in out
    assert '<h2 id="skipped">' in (tmp_path / "r.html").read_text()
    with pytest.warns(SkippedRunWarning, match=re.escape(line)):
        df = load_runs(root)
    assert len(df) == 2 and [s["path"] for s in df.attrs["skipped"]] == [str(run)]
    with pytest.warns(SkippedRunWarning, match=re.escape(line)):
        assert [s["path"] for s in compare(root).skipped] == [str(run)]
    with pytest.raises(UserError, match=re.escape(f"{run} cannot be read: {why}")):
        load_samples(run)
