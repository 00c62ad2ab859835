"""softeval.results on real run folders: a tiny random model and the toy format task (tests/support/tiny.py), run by
run_job with three methods and two seeds (few-shot's), plus two more base models for a ranking and one damaged copy
of a run (an edited results.json). Built once for the module."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from tiny import format_task, tiny_lm, toy_config

from softeval import tasks
from softeval.cli import main
from softeval.errors import UserError
from softeval.results import SkippedRunWarning, compare, load_runs, load_samples
from softeval.run.pipeline import run_job
from softeval.store.identity import identity_of

pd = pytest.importorskip("pandas")

PAIRS = [("tiny-0", "post-a"), ("tiny-1", "post-b"), ("tiny-2", "post-c")]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("results") / "runs"
    with pytest.MonkeyPatch.context() as mp:
        task = format_task()
        mp.setitem(tasks.TASKS, task.name, task)
        small = dict(steps=2, curve_every=2, curve_items=0, limit=8)
        run_job(toy_config(out, methods=("zero-shot", "few-shot", "soft-prompt"), **small), lm=tiny_lm())
        run_job(toy_config(out, methods=("few-shot",), seed=1, **small), lm=tiny_lm())
        for seed in (1, 2):  # two more base models, zero-shot only: the ranking's other bases
            run_job(toy_config(out, model=f"tiny-{seed}", methods=("zero-shot",), **small), lm=tiny_lm(seed))
    # a real run's folder copied under another model and its results.json edited: damaged, never a result
    damaged = out / "tiny-x" / "toyformat" / "few-shot" / "seed1"
    shutil.copytree(out / "tiny-0" / "toyformat" / "few-shot" / "seed1", damaged)
    results = json.loads((damaged / "results.json").read_text())
    results["metrics"]["accuracy"]["value"] = 0.99
    (damaged / "results.json").write_text(json.dumps(results))
    (out.parent / "post.csv").write_text("model,task,score\npost-a,toyformat,0.2\npost-b,toyformat,0.5\n"
                                  "post-c,toyformat,0.7\n")
    return out


def _finished(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("tiny-[0-9]/*/*/seed*/results.json"))


def test_one_row_per_finished_run_with_the_numbers_of_its_results_json(root):
    with pytest.warns(SkippedRunWarning):
        df = load_runs(root)
    assert sorted(df["path"]) == [str(p) for p in _finished(root)]
    assert set(zip(df["model"], df["method"], df["seed"])) == {
        ("tiny-0", "zero-shot", 0), ("tiny-0", "few-shot", 0), ("tiny-0", "few-shot", 1),
        ("tiny-0", "soft-prompt", 0), ("tiny-1", "zero-shot", 0),
        ("tiny-2", "zero-shot", 0)}
    for row in df.itertuples(index=False):
        results = json.loads((Path(row.path) / "results.json").read_text())
        assert row.n == results["n"] == 8 and row.task == "toyformat" and row.model_kind == "base"
        for metric, record in results["metrics"].items():
            got = df.loc[df["path"] == row.path].iloc[0]
            assert got[metric] == pytest.approx(record["value"], nan_ok=True)
            assert got[f"{metric}_low"] == pytest.approx(record["ci_low"], nan_ok=True)
            assert got[f"{metric}_high"] == pytest.approx(record["ci_high"], nan_ok=True)
            assert got[f"{metric}_n"] == record["n"]
        assert row.identity == identity_of(results["config"])
        assert row.format_failed == results["format_failures"]["failed"]
    # the identity: its options as columns where the method reads them, and one digest per run
    assert df["identity_sha256"].is_unique
    assert list(df.loc[df["method"] == "soft-prompt", "config.steps"]) == [2]
    assert sorted(df.loc[df["method"] == "few-shot", "config.seed"]) == [0, 1]
    assert df.loc[df["method"] == "zero-shot", "config.steps"].isna().all()  # zero-shot reads no tuning option
    assert df.groupby("method")["accuracy"].mean().index.tolist() == ["few-shot", "soft-prompt", "zero-shot"]


def test_a_damaged_run_is_named_with_its_reason_in_a_warning_and_in_attrs(root):
    damaged = root / "tiny-x" / "toyformat" / "few-shot" / "seed1"
    with pytest.warns(SkippedRunWarning, match="tiny-x.*edited") as caught:
        df = load_runs(root)
    assert str(damaged) not in set(df["path"])
    skipped = {s["path"]: s["reason"] for s in df.attrs["skipped"]}
    assert "metrics.accuracy.value is 0.99" in skipped[str(damaged)] and "damaged" in skipped[str(damaged)]
    assert any(str(damaged) in str(w.message) for w in caught)
    with pytest.warns(SkippedRunWarning, match="tiny-x"):  # named again on the next call, not once per session
        load_runs(root)


def test_samples_one_row_per_item_with_the_fields_of_samples_jsonl(root):
    with pytest.warns(SkippedRunWarning):
        runs = load_runs(root)
    row = runs[(runs["method"] == "few-shot") & (runs["seed"] == 1)].iloc[0]
    items = load_samples(row)  # a row of load_runs
    lines = [json.loads(line) for line in (Path(row["path"]) / "samples.jsonl").read_text().splitlines()]
    assert len(items) == len(lines) == row["n"]
    for column in ("output", "strict", "lenient", "correct", "format_ok", "cause"):
        assert column in items.columns
    assert list(items["id"]) == [line["id"] for line in lines]
    assert list(items["output"]) == [line["output"] for line in lines]
    assert list(items["cause"]) == [line["failure"] for line in lines]  # samples.jsonl's failure, renamed
    assert items["correct"].mean() == pytest.approx(row["accuracy"])
    assert items["format_ok"].mean() == pytest.approx(row["format_rate"])
    assert set(items["method"]) == {"few-shot"} and set(items["seed"]) == {1}
    assert load_samples(row["path"]).equals(items)  # or the folder itself


def test_samples_of_a_damaged_run_are_refused_naming_why(root):
    with pytest.raises(UserError, match="edited"):
        load_samples(root / "tiny-x" / "toyformat" / "few-shot" / "seed1")
    with pytest.raises(UserError, match="does not exist"):
        load_samples(root / "nowhere")


def test_compare_is_the_record_the_cli_prints(root, capsys):
    args = ["--post-scores", str(root.parent / "post.csv"), "--n-boot", "200"]
    with pytest.warns(SkippedRunWarning):
        got = compare(root, PAIRS, post_scores=root.parent / "post.csv", n_boot=200)
    capsys.readouterr()
    assert main(["compare", str(root), "--json", *(f"--pair={b}={p}" for b, p in PAIRS), *args]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert json.loads(json.dumps(got.record)) == printed
    # the tables hold the record's numbers
    assert len(got.paired_tests) == len(printed["paired_tests"]) == 2  # soft-prompt against zero-shot and few-shot
    for row, want in zip(got.paired_tests.to_dict("records"), printed["paired_tests"]):
        for key in ("a", "b", "n", "a_only", "b_only", "difference", "p_value"):
            assert row[key] == want[key]
    assert list(got.ranking["method"]) == [r["method"] for r in printed["results"]] == ["zero-shot"]
    assert got.ranking["kendall_tau"].iloc[0] == pytest.approx(printed["results"][0]["kendall_tau"])
    assert got.ranking_mean["kendall_tau"].iloc[0] == pytest.approx(printed["average"][0]["kendall_tau"])
    assert [s["path"] for s in got.skipped] == [s["path"] for s in printed["skipped_folders"]]
    assert str(root / "tiny-x" / "toyformat" / "few-shot" / "seed1") in {s["path"] for s in got.skipped}
    with pytest.warns(SkippedRunWarning):  # pairs as a dict or as BASE=POST strings: the same record
        for pairs in (dict(PAIRS), [f"{b}={p}" for b, p in PAIRS]):
            assert compare(root, pairs, post_scores=root.parent / "post.csv", n_boot=200).record == got.record


def test_compare_without_pairs_has_no_ranking(root):
    with pytest.warns(SkippedRunWarning):
        got = compare(root)
    assert got.ranking is None and got.ranking_mean is None and "results" not in got.record
    assert set(got.paired_tests["a"]) == {"zero-shot", "few-shot"} and set(got.paired_tests["b"]) == {"soft-prompt"}
    assert list(got.lm_eval_groups.columns)[:2] == ["group", "alias"] and got.lm_eval_groups.empty
    with pytest.raises(UserError, match="post-trained side of a ranking"):
        compare(root, post_scores=root.parent / "post.csv")


def test_an_empty_root_gives_an_empty_table_with_the_columns(tmp_path):
    df = load_runs(tmp_path)
    assert df.empty and {"model", "task", "method", "seed", "accuracy", "identity_sha256"} <= set(df.columns)
    assert df.attrs["skipped"] == []


def test_without_pandas_one_line_naming_the_extra(root, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` then raises ImportError
    for call in (lambda: load_runs(root), lambda: load_samples(_finished(root)[0]), lambda: compare(root)):
        with pytest.raises(UserError) as err:
            call()
        assert "pip install 'softeval[pandas]'" in str(err.value) and "\n" not in str(err.value)


def test_importing_the_module_imports_no_pandas():
    import subprocess

    code = "import sys, softeval.results; sys.exit('pandas' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
