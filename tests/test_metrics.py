"""Aggregate metrics and answer counts of a run."""

import pytest

from softeval.metrics import answer_counts, proportion


def test_answer_counts_show_a_label_prior():
    samples = [{"strict": "B", "gold": g} for g in "ABCDABCD"] + [{"strict": None, "gold": "A"}]
    counts = answer_counts(samples, top=3)
    assert counts["strict"] == [["B", 8], [None, 1]]
    assert counts["gold"] == [["A", 3], ["B", 2], ["C", 2]]


def test_proportion_has_a_wilson_interval_around_the_value():
    p = proportion([True] * 3 + [False] * 7)
    assert p["value"] == 0.3 and p["n"] == 10
    assert 0.10 < p["ci_low"] < 0.3 < p["ci_high"] < 0.61


def test_run_table_shows_the_top_answer(capsys):
    from softeval.cli.app import print_table

    metric = {"value": 0.32, "ci_low": 0.21, "ci_high": 0.46, "n": 50}
    result = {"model": "m", "model_kind": "base", "task": "hellaswag", "n": 50, "method": "soft-prompt",
              "metrics": {"accuracy": metric}, "answers": {"strict": [["B", 46], ["D", 4]], "gold": [["B", 15]]}}
    print_table([result, {**result, "method": "zero-shot", "answers": {"strict": [[None, 30]], "gold": []}}])
    out = capsys.readouterr().out
    assert "top answer" in out and "46/50" in out and "no answer" in out and "30/50" in out and "none" not in out


def test_run_table_is_whole_in_a_log_file(capsys):
    """Output to a pipe or file (no terminal width): every metric column and its interval is printed
    on one line each, none cut at 80 columns."""
    from softeval.cli.app import SHORT, print_table
    from softeval.protocol import METRICS

    metric = {"value": 0.32, "ci_low": 0.21, "ci_high": 0.46, "n": 50}
    result = {"model": "some-long-model-name", "model_kind": "base", "task": "mmlu", "n": 50, "method": "soft-prompt",
              "metrics": dict.fromkeys(METRICS, metric), "answers": {"strict": [["B", 46]], "gold": [["B", 15]]}}
    print_table([result])
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if "method" in line)
    assert all(SHORT[m] in header for m in METRICS) and "top answer" in header
    assert sum(line.count("[0.21, 0.46]") for line in lines) == len(METRICS)


def test_wilson_bounds_are_exact_at_none_and_all():
    none, every = proportion([False] * 50), proportion([True] * 50)
    assert none["ci_low"] == 0.0 and every["ci_high"] == 1.0
    assert none["ci_high"] == pytest.approx(0.0713, abs=1e-4) and every["ci_low"] == pytest.approx(1 - 0.0713, abs=1e-4)


def test_methods_and_metrics_are_one_list_each():
    """One source of truth: the methods are the registry's (softeval.methods) and the metrics protocol.METRICS;
    the CLI, the index, compare and the report keep no copies."""
    from softeval import methods, protocol
    from softeval.analysis import compare, report
    from softeval.cli import app
    from softeval.store import index

    for name in ("METHODS", "DEFAULT_METHODS", "TUNED_METHODS"):
        assert not hasattr(protocol, name)
    for module in (index, report, app):
        assert module.METRICS is protocol.METRICS
    assert compare.post_methods()[:-1] == methods.names()
    assert compare.reference_method() == methods.with_role(methods.REFERENCE)[0]
    assert set(compare.PER_ITEM) <= set(protocol.METRICS)
    assert app.build_parser().parse_args(["run", "--model", "m", "--task", "t"]).method == ",".join(
        methods.default_names())
