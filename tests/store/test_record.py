"""results.json's record (softeval.store.schema.ResultsRecord; its format version: softeval.store.record): what the
run writes, what every reader checks, what docs/reference/run-format.md names, key for key; and the format versions of
results.json and the runs index: a file of another version (or of none) is refused in one line naming both, never read
as this one."""

from __future__ import annotations

import json
import re
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from runfactory import Items, outcomes, write_run
from tiny import tiny_lm, toy_config

from softeval import cli
from softeval.constants import SOFT_PROMPT_FORMAT_VERSION
from softeval.errors import UserError
from softeval.lm.softprompt import SOFTEVAL_META
from softeval.run.pipeline import is_finished, run_job
from softeval.store import index
from softeval.store.format import INDEX_FILE, RESULTS_FILE, load_results, scan
from softeval.store.record import RESULTS_FORMAT_VERSION, OtherFormat
from softeval.store.runs import FIXES, OtherSettings, RunFolder
from softeval.store.schema import RESULTS_KEYS as KEYS
from softeval.store.schema import ResultsRecord
from softeval.version import __version__

DOC = Path(__file__).parents[2] / "docs" / "reference" / "run-format.md"
# The keys results.json had, in this order, before it had a record and a format version: what the run
# writes now is the same file with format_version added first.
BEFORE = ["softeval_version", "model", "model_kind", "model_kind_source", "task", "method", "seed", "n",
          "series", "step", "metrics", "answers", "format_failures", "item_ids", "split", "chat_template",
          "engine", "truncated_prompts", "unscorable", "tuning", "config", "versions", "git", "started_at",
          "finished_at", "wall_seconds", "samples_count", "samples_sha256"]
DAMAGED = "damaged (rerun it with `softeval run` and the same options)"


def _documented_keys() -> list[str]:
    """The top-level keys of the results.json example in docs/reference/run-format.md, in its order."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## `results.json`"):]
    section = section[:section.index("\n## ")]
    keys = []
    for line in section.splitlines():
        if not line.startswith('      "'):  # a key of the object (the example is indented by four, then two)
            continue
        depth = 0
        for match in re.finditer(r'"(\w+)"\s*:|[{\[]|[}\]]', line.split("#", 1)[0]):
            token = match.group(0)
            depth += 1 if token in "{[" else -1 if token in "}]" else 0
            if match.group(1) and depth == 0:
                keys.append(match.group(1))
    return keys


def test_run_format_md_names_every_key_of_the_record_in_the_order_written():
    assert _documented_keys() == list(KEYS)


def test_the_record_is_the_file_as_written_before_it_with_a_format_version_first():
    assert list(KEYS) == ["format_version", *BEFORE] and RESULTS_FORMAT_VERSION == 1


def test_the_run_fills_the_record_and_saves_its_soft_prompt_with_a_format_version(toy, tmp_path):
    returned = run_job(toy_config(tmp_path, methods=("zero-shot", "soft-prompt"), steps=2), lm=tiny_lm())
    for method, result in zip(("zero-shot", "soft-prompt"), returned):
        folder = tmp_path / "tiny-0" / "toyformat" / method / "seed0"
        written = json.loads((folder / RESULTS_FILE).read_text())
        assert list(written) == list(KEYS) and written["format_version"] == RESULTS_FORMAT_VERSION
        assert json.loads(json.dumps(result, default=str)) == written  # what run_job returns is the file
        assert load_results(folder) == written  # the reader takes it as it is
        assert ResultsRecord(**written).as_json() == written
    soft_prompt = tmp_path / "tiny-0" / "toyformat" / "soft-prompt" / "seed0" / "soft_prompt"
    meta = json.loads((soft_prompt / SOFTEVAL_META).read_text())
    assert meta["format_version"] == SOFT_PROMPT_FORMAT_VERSION


def _rewrite(run: Path, **changes) -> dict:
    results = json.loads((run / RESULTS_FILE).read_text())
    for key, value in changes.items():
        if value is KeyError:
            del results[key]
        else:
            results[key] = value
    (run / RESULTS_FILE).write_text(json.dumps(results))
    return results


@pytest.mark.parametrize("key", [k for k in KEYS if k != "format_version"])
def test_a_results_json_without_a_key_of_the_record_is_damage(tmp_path, key):
    run = write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    _rewrite(run, **{key: KeyError})
    assert scan(tmp_path).skipped == [(run, f"results.json lacks {key}")]


@pytest.mark.parametrize("key, value, said", [
    ("seed", "0", "an integer"), ("metrics", [], "an object"), ("series", 5, "a string or null"),
    ("step", 1.5, "an integer or null"), ("chat_template", "yes", "true or false"),
    ("engine", None, "an object"), ("tuning", [], "an object or null"), ("item_ids", "abc", "a list"),
    ("git", 1, "a string or null"), ("wall_seconds", "1", "a number"), ("unscorable", -1, "a count of items"),
    ("samples_count", True, "a count of items"), ("samples_sha256", None, "a string"),
    ("format_version", "1", "an integer"), ("format_version", True, "an integer"),
    ("format_version", 1.0, "an integer"),
])
def test_a_results_json_value_of_another_type_than_its_record_says_is_damage(tmp_path, key, value, said):
    run = write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    _rewrite(run, **{key: value})
    assert scan(tmp_path).skipped == [(run, f"results.json {key!r} is not {said}")]


def test_a_results_json_with_a_key_the_record_lacks_is_damage(tmp_path):
    run = write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    _rewrite(run, loglik_accuracy=0.5)
    assert scan(tmp_path).skipped == [(run, "results.json has 'loglik_accuracy', which no results.json of "
                                            "format_version 1 has")]


def test_metrics_the_samples_give_but_results_json_lacks_are_damage(tmp_path):
    run = write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5),
                    items=Items(cloze_correct=outcomes(10, 0.3)))
    metrics = json.loads((run / RESULTS_FILE).read_text())["metrics"]
    del metrics["cloze_accuracy_norm"]
    _rewrite(run, metrics=metrics)
    assert scan(tmp_path).skipped == [(run, "results.json lacks metrics.cloze_accuracy_norm, not what its "
                                            f"samples.jsonl gives (edited?): {DAMAGED}")]


OTHER_VERSIONS = [(2, "format_version 2"), (0, "format_version 0"),
                  (KeyError, "no format_version, so was written before softeval recorded one")]


@pytest.mark.parametrize("found, said", OTHER_VERSIONS)
def test_a_run_of_another_format_version_is_skipped_by_every_reader_naming_both_versions(
        tmp_path, capsys, monkeypatch, found, said):
    monkeypatch.setenv("COLUMNS", "300")
    run = write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    write_run(tmp_path, "model-b", "mmlu", "zero-shot", outcomes(10, 0.5))
    assert len(index.list_runs(tmp_path)) == 2
    _rewrite(run, format_version=found, softeval_version="0.2.0")
    why = (f"results.json has {said}; this softeval reads format_version 1: rerun it with `softeval run`, "
           "its options and --force, or read it with softeval 0.2.0")
    assert scan(tmp_path).skipped == [(run, why)]
    seen: list = []  # an indexed run whose results.json changed: checked again, dropped
    listed = index.list_runs(tmp_path, on_skip=lambda p, w: seen.append((p, w)))
    assert [r["model"] for r in listed] == ["model-b"]
    assert seen == [(run, why)]
    (tmp_path / INDEX_FILE).unlink()  # built again from the folders, saying what it skipped
    assert cli.main(["runs", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert f"skipped {run}: results.json has {said}" in " ".join((captured.out + captured.err).split())
    with pytest.raises(OtherFormat):
        load_results(run)


def test_a_run_written_by_this_softeval_version_in_another_format_names_no_softeval_to_use(tmp_path):
    run = write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    _rewrite(run, format_version=KeyError)
    why = ("results.json has no format_version, so was written before softeval recorded one; this softeval "
           "reads format_version 1: rerun it with `softeval run`, its options and --force")
    assert scan(tmp_path).skipped == [(run, why)]


@pytest.mark.parametrize("found, said", OTHER_VERSIONS)
def test_softeval_run_refuses_a_finished_run_of_another_format_version_and_force_replaces_it(toy, tmp_path,
                                                                                              found, said):
    config = toy_config(tmp_path, methods=("zero-shot",))
    first = run_job(config, lm=tiny_lm())[0]
    final = tmp_path / "tiny-0" / "toyformat" / "zero-shot" / "seed0"
    _rewrite(final, format_version=found, softeval_version="0.2.0")
    files = {p.name: p.read_bytes() for p in final.iterdir()}
    line = (f"a finished run in another format is at {final} (results.json has {said}; this softeval reads "
            "format_version 1; written by softeval 0.2.0). ")
    with pytest.raises(UserError) as refused:
        run_job(config, lm=tiny_lm())
    assert str(refused.value) == line + FIXES["run"]
    assert {p.name: p.read_bytes() for p in final.iterdir()} == files  # not moved aside, not touched
    assert [p.name for p in final.parent.iterdir()] == ["seed0"]
    with pytest.raises(OtherSettings) as asked:  # a sweep's driver and workers ask without the lock
        is_finished(config, "zero-shot")
    assert str(asked.value.said_by("sweep")) == line + FIXES["sweep"]
    forced = run_job(toy_config(tmp_path, methods=("zero-shot",), force=True), lm=tiny_lm())[0]
    assert forced["format_version"] == RESULTS_FORMAT_VERSION and forced["metrics"] == first["metrics"]
    assert load_results(final)["finished_at"] == forced["finished_at"]


def _user_version(out: Path, set_to: int | None = None) -> int:
    with closing(sqlite3.connect(out / INDEX_FILE)) as conn:
        if set_to is not None:
            conn.execute(f"PRAGMA user_version = {set_to}")
            conn.commit()
        return conn.execute("PRAGMA user_version").fetchone()[0]


def test_the_index_records_its_format_version(tmp_path):
    write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    index.list_runs(tmp_path)
    assert _user_version(tmp_path) == index.INDEX_FORMAT_VERSION == 2


def test_an_index_of_an_older_format_version_is_rebuilt_from_the_folders(tmp_path):
    write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    write_run(tmp_path, "model-b", "mmlu", "zero-shot", outcomes(10, 0.3))
    # as written before the index had a version: another schema, user_version 0
    with closing(sqlite3.connect(tmp_path / INDEX_FILE)) as conn:
        conn.execute("CREATE TABLE runs (path TEXT PRIMARY KEY, model TEXT NOT NULL, metrics_json TEXT)")
        conn.execute("INSERT INTO runs VALUES ('ghost/mmlu/zero-shot/seed0', 'ghost', '{}')")
        conn.commit()
    assert _user_version(tmp_path) == 0
    rows = index.list_runs(tmp_path)
    assert [(r["model"], r["accuracy"]) for r in rows] == [("model-a", 0.5), ("model-b", 0.3)]
    assert _user_version(tmp_path) == index.INDEX_FORMAT_VERSION


def test_an_index_of_a_newer_format_version_is_one_line_and_rebuild_replaces_it(tmp_path, capsys):
    run = write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    index.list_runs(tmp_path)
    newer = index.INDEX_FORMAT_VERSION + 1
    _user_version(tmp_path, set_to=newer)
    line = (f"the runs index {tmp_path / INDEX_FILE} has format_version {newer}; this softeval ({__version__}) "
            f"reads format_version {index.INDEX_FORMAT_VERSION}: use the softeval that wrote it, or rebuild it "
            f"from the run folders "
            f"with `{index.rebuild_command(tmp_path)}`")
    with pytest.raises(index.IndexOtherVersion) as refused:
        index.list_runs(tmp_path)
    assert str(refused.value) == line
    assert cli.main(["runs", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: {line}\n"
    with pytest.raises(index.IndexOtherVersion):
        index.record_run(tmp_path, run)
    RunFolder(tmp_path, run).index()  # a finishing run: a warning, and it carries on
    assert capsys.readouterr().err.startswith(f"warning: could not add {run} to the runs index: {line}")
    assert _user_version(tmp_path) == newer  # left as it was
    assert cli.main(["runs", str(tmp_path), "--rebuild"]) == 0
    assert "Rebuilt" in capsys.readouterr().out and _user_version(tmp_path) == index.INDEX_FORMAT_VERSION
    assert [r["model"] for r in index.list_runs(tmp_path)] == ["model-a"]
    assert not list(tmp_path.glob(f"{INDEX_FILE}.damaged-*"))  # replaced, not kept as damaged


def test_a_read_only_root_whose_index_is_of_another_version_is_listed_from_its_folders(tmp_path, monkeypatch):
    write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    index.list_runs(tmp_path)
    with closing(sqlite3.connect(tmp_path / INDEX_FILE)) as conn:
        conn.execute("UPDATE runs SET accuracy = 0.99")
        conn.execute(f"PRAGMA user_version = {index.INDEX_FORMAT_VERSION + 1}")
        conn.commit()
    monkeypatch.setattr(index, "write_refusal", lambda folder: "read-only file system")
    assert [r["accuracy"] for r in index.list_runs(tmp_path)] == [0.5]


def test_an_index_row_of_another_results_format_is_checked_again_not_listed_as_it_is(tmp_path):
    write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    index.list_runs(tmp_path)
    with closing(sqlite3.connect(tmp_path / INDEX_FILE)) as conn:  # its stamp still matches the files
        conn.execute("UPDATE runs SET format_version = 0, accuracy = 0.99")
        conn.commit()
    [row] = index.list_runs(tmp_path)
    assert row["accuracy"] == 0.5 and "format_version" not in row
    with closing(sqlite3.connect(tmp_path / INDEX_FILE)) as conn:
        assert conn.execute("SELECT format_version, accuracy FROM runs").fetchall() == [(1, 0.5)]
