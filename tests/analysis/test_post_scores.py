"""`softeval compare --post-scores FILE`: the post-trained side of the ranking read from a file of scores,
the file reader property-tested, every refusal one line, and the source named in every output."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runfactory import write_run

from softeval.analysis.compare import compare_runs, load_runs
from softeval.analysis.post_scores import PostScore, parse_post_scores, read_post_scores
from softeval.cli import analysis as cli_analysis
from softeval.errors import UserError

names = st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters=",\"'"), min_size=1,
                max_size=12)
scores = st.floats(0, 1, allow_nan=False)
rows = st.lists(st.tuples(names, names, scores, st.none() | st.integers(1, 10**6)), max_size=12,
                unique_by=lambda r: (r[0], r[1])).filter(bool)


def _csv(records: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["model", "task", "score", "n", "source"])
    writer.writeheader()
    for r in records:
        writer.writerow({**r, "n": "" if r.get("n") is None else r["n"], "source": "a leaderboard"})
    return out.getvalue()


def _records(found) -> list[dict]:
    return [{"model": m, "task": t, "score": s, "n": n} for m, t, s, n in found]


@settings(max_examples=60, deadline=None)
@given(rows, st.booleans())
def test_a_file_of_valid_rows_reads_back_as_written_as_csv_and_as_json(found, as_json):
    records = _records(found)
    text = json.dumps(records) if as_json else _csv(records)
    read = parse_post_scores(text, "scores.x", as_json=as_json)
    assert read.rows == {(m, t): PostScore(m, t, float(repr(s)) if not as_json else s, n) for m, t, s, n in found}


def _one_line_refusal(text: str, as_json: bool, match: str) -> str:
    with pytest.raises(UserError, match=match) as err:
        parse_post_scores(text, "scores.x", as_json=as_json)
    assert "\n" not in str(err.value) and str(err.value).startswith("--post-scores scores.x")
    return str(err.value)


@settings(max_examples=60, deadline=None)
@given(rows, st.data(), st.booleans())
def test_a_score_outside_0_1_is_refused_and_percent_is_named(found, data, as_json):
    records = _records(found)
    bad = data.draw(st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not 0 <= x <= 1))
    at = data.draw(st.integers(0, len(records) - 1))
    records[at]["score"] = bad
    said = _one_line_refusal(json.dumps(records) if as_json else _csv(records), as_json, f"row {at + 1}: score")
    assert ("in percent?" in said) == (1 < bad <= 100)


@settings(max_examples=40, deadline=None)
@given(rows, st.data(), st.booleans())
def test_a_duplicate_model_and_task_is_refused_naming_both_rows(found, data, as_json):
    records = _records(found)
    at = data.draw(st.integers(0, len(records) - 1))
    records.append({**records[at], "score": 0.5})
    _one_line_refusal(json.dumps(records) if as_json else _csv(records), as_json,
                      f"rows {at + 1} and {len(records)} are both model")


@settings(max_examples=40, deadline=None)
@given(rows, st.sampled_from(["model", "task", "score"]), st.booleans())
def test_a_missing_column_is_refused_naming_it(found, column, as_json):
    records = [{k: v for k, v in r.items() if k != column} for r in _records(found)]
    text = json.dumps(records) if as_json else _csv(records).replace(f"{column},", "x_,", 1) \
        .replace(f",{column},", ",x_,", 1)
    _one_line_refusal(text, as_json, f"lacks {column}")


@pytest.mark.parametrize("value, said", [("high", "is not a number"), ("85%", "is in percent"),
                                         ("nan", "is not a number"), ("", "is not a number")])
def test_a_score_that_is_not_a_number_is_refused(value, said):
    _one_line_refusal(f"model,task,score\nm,mmlu,{value}\n", False, said)


def test_n_must_be_a_whole_count_and_may_be_left_out():
    assert parse_post_scores("model,task,score,n\nm,mmlu,0.5,\n", "f").get("m", "mmlu").n is None
    assert parse_post_scores('[{"model": "m", "task": "t", "score": 1, "n": 40}]', "f", as_json=True) \
        .get("m", "t") == PostScore("m", "t", 1.0, 40)
    _one_line_refusal("model,task,score,n\nm,mmlu,0.5,2.5\n", False, "n '2.5' is not a whole number")
    _one_line_refusal('{"model": "m"}', True, "must be a list of objects")
    _one_line_refusal("model,task,score\n", False, "has no rows")


def test_a_file_that_is_not_there_or_not_text_is_one_line(tmp_path: Path):
    with pytest.raises(UserError, match="no such file"):
        read_post_scores(tmp_path / "none.csv")
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00model")
    with pytest.raises(UserError, match="not UTF-8"):
        read_post_scores(tmp_path / "bin.csv")


def test_anything_but_a_regular_file_is_refused_before_it_is_opened(tmp_path: Path):
    """Issue 60, 9: `--post-scores <a FIFO>` blocked until killed. A writer waits on the pipe: had the reader
    opened it, it would have read the rows (this test failed); refused, the pipe is never opened."""
    with pytest.raises(UserError, match="is a folder, not a file: give a CSV or JSON file"):
        read_post_scores(tmp_path)
    if not hasattr(os, "mkfifo"):
        return
    pipe = tmp_path / "scores.csv"
    os.mkfifo(pipe)
    writer = threading.Thread(target=lambda: pipe.write_text("model,task,score\npost-1,mmlu,0.5\n"), daemon=True)
    writer.start()
    try:
        with pytest.raises(UserError) as refused:
            read_post_scores(pipe)
        assert str(refused.value) == (f"--post-scores {pipe} is a named pipe (FIFO), not a file: give a CSV or JSON "
                                      "file of model, task, score")
    finally:  # let the writer's open return, so that its thread ends
        reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
        writer.join()
        os.close(reader)


PAIRS = [("base-1", "post-1"), ("base-2", "post-2"), ("base-3", "post-3"), ("base-4", "post-4")]


def _bases(out: Path, counts: list[int], n: int = 10) -> None:
    for (b, _), k in zip(PAIRS, counts):
        write_run(out, b, "mmlu", "zero-shot", [i < k for i in range(n)])


def _file(tmp_path: Path, post: list[float], n: int | None = None, extra: str = "") -> Path:
    path = tmp_path / "leaderboard.csv"
    lines = ["model,task,score,n"] + [f"{p},mmlu,{s},{'' if n is None else n}" for (_, p), s in zip(PAIRS, post)]
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def test_filed_scores_give_the_same_ranking_statistics_as_runs_with_those_scores(tmp_path: Path):
    _bases(tmp_path / "runs", [1, 4, 3, 5])
    runs, _ = load_runs(tmp_path / "runs")
    filed = compare_runs(runs, PAIRS, n_boot=200, post_scores=read_post_scores(_file(tmp_path, [.2, .5, .6, .7])))
    [row] = filed.results
    assert row.kendall_tau == pytest.approx(2 / 3) and row.spearman_rho == pytest.approx(0.8)  # as test_compare
    assert row.post_scores == {"post-1": 0.2, "post-2": 0.5, "post-3": 0.6, "post-4": 0.7}
    data = filed.to_json()
    assert data["post_scores_file"] == str(tmp_path / "leaderboard.csv") and data["post_method"] is None
    assert "not runs" in data["post_side"] and any("not from runs" in note for note in data["notes"])
    # with n, the filed scores are drawn too: the interval can only widen
    wider = compare_runs(runs, PAIRS, n_boot=200, post_scores=read_post_scores(_file(tmp_path, [.2, .5, .6, .7], 20)))
    assert wider.results[0].ci_high - wider.results[0].ci_low >= row.ci_high - row.ci_low


def test_a_filed_model_that_matches_no_base_model_and_a_pair_without_a_row_are_refused(tmp_path: Path):
    _bases(tmp_path / "runs", [1, 4, 3, 5])
    runs, _ = load_runs(tmp_path / "runs")
    stray = read_post_scores(_file(tmp_path, [.2, .5, .6, .7], extra="post-9,mmlu,0.4,\n"))
    with pytest.raises(UserError, match=r"model 'post-9' matches no base model: add --pair BASE=post-9"):
        compare_runs(runs, PAIRS, n_boot=50, post_scores=stray)
    short = read_post_scores(_file(tmp_path, [.2, .5, .6]))
    with pytest.raises(UserError, match=r"--pair base-4=post-4: .* has no row for model 'post-4'"):
        compare_runs(runs, PAIRS, n_boot=50, post_scores=short)
    with pytest.raises(UserError, match="leave --post-method out"):
        compare_runs(runs, PAIRS, post_method="best", n_boot=50, post_scores=read_post_scores(
            _file(tmp_path, [.2, .5, .6, .7])))


def _cli(*argv: str):
    parser = argparse.ArgumentParser()
    cli_analysis.register(parser.add_subparsers())
    args = parser.parse_args(list(argv))
    return args.handler(args)


def test_cli_compare_names_the_file_in_the_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    _bases(tmp_path / "runs", [1, 4, 3, 5])
    path = _file(tmp_path, [.2, .5, .6, .7])
    pairs = [f"--pair={b}={p}" for b, p in PAIRS]
    assert _cli("compare", str(tmp_path / "runs"), "--n-boot", "100", "--post-scores", str(path), *pairs) == 0
    table = capsys.readouterr().out
    assert "scores from" in table and "leaderboard.csv" in table
    assert _cli("compare", str(tmp_path / "runs"), "--json", "--n-boot", "100", "--post-scores", str(path),
                *pairs) == 0
    assert json.loads(capsys.readouterr().out)["post_scores_file"] == str(path)
    with pytest.raises(UserError, match="give --pair BASE=POST"):
        _cli("compare", str(tmp_path / "runs"), "--post-scores", str(path))


def test_the_report_names_the_file_as_the_post_trained_side(tmp_path: Path):
    _bases(tmp_path / "runs", [1, 4, 3, 5])
    path = _file(tmp_path, [.2, .5, .6, .7])
    assert _cli("report", str(tmp_path / "runs"), "-o", str(tmp_path / "r.html"), "--n-boot", "60",
                "--post-scores", str(path), *[f"--pair={b}={p}" for b, p in PAIRS]) == 0
    page = (tmp_path / "r.html").read_text()
    assert f"Post-trained side: scores from {path}" in page
