"""Aggregate metrics and answer counts of a run."""

import argparse

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
    from softeval.cli.app import print_table
    from softeval.metrics import METRIC, METRICS

    metric = {"value": 0.32, "ci_low": 0.21, "ci_high": 0.46, "n": 50}
    result = {"model": "some-long-model-name", "model_kind": "base", "task": "mmlu", "n": 50, "method": "soft-prompt",
              "metrics": dict.fromkeys(METRICS, metric), "answers": {"strict": [["B", 46]], "gold": [["B", 15]]}}
    print_table([result])
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if "method" in line)
    assert all(METRIC[m].short in header for m in METRICS) and "top answer" in header
    assert sum(line.count("[0.21, 0.46]") for line in lines) == len(METRICS)


def test_wilson_bounds_are_exact_at_none_and_all():
    none, every = proportion([False] * 50), proportion([True] * 50)
    assert none["ci_low"] == 0.0 and every["ci_high"] == 1.0
    assert none["ci_high"] == pytest.approx(0.0713, abs=1e-4) and every["ci_low"] == pytest.approx(1 - 0.0713, abs=1e-4)


def test_methods_and_metrics_are_one_list_each():
    """One source of truth: the methods are the registry's (softeval.methods) and the metrics softeval.metrics'
    METRIC_TABLE; constants, the CLI, the index, compare, choices and the report keep no copies."""
    from softeval import constants, methods, metrics, results
    from softeval.analysis import choices, compare, report
    from softeval.cli import app
    from softeval.store import index

    for name in ("METHODS", "DEFAULT_METHODS", "TUNED_METHODS", "METRICS"):
        assert not hasattr(constants, name)
    for module, name in ((metrics, "ITEM_FIELDS"), (choices, "PER_ITEM"), (compare, "PER_ITEM"), (app, "SHORT"),
                         (results, "EVERY_RUN_METRICS")):
        assert not hasattr(module, name), f"{module.__name__}.{name}: a copy of softeval.metrics.METRIC_TABLE"
    for module in (index, report, app):
        assert module.METRICS is metrics.METRICS
    assert compare.post_methods()[:-1] == methods.names()
    assert compare.reference_method() == methods.with_role(methods.REFERENCE)[0]
    commands = next(a for a in app.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command in ("compare", "report"):
        option = next(a for a in commands.choices[command]._actions if a.dest == "metric")
        assert tuple(option.choices) == metrics.COMPARED
    assert app.build_parser().parse_args(["run", "--model", "m", "--task", "t"]).method == ",".join(
        methods.default_names())


def test_aggregate_reads_the_metric_table_in_results_json_order():
    """aggregate's keys (results.json's order, byte for byte): the proportions in table order, only the optional ones
    some item has, then the mean f1; knowledge_accuracy over the items with format_ok only."""
    from softeval.metrics import aggregate

    samples = [{"correct": c, "format_ok": f, "lenient_correct": c or not f, "f1": f1, "cloze_correct": cl}
               for c, f, f1, cl in ((True, True, 1.0, True), (False, True, 0.5, None), (False, False, 0.0, False))]
    metrics = aggregate(samples)
    assert list(metrics) == ["accuracy", "format_rate", "knowledge_accuracy", "lenient_accuracy", "cloze_accuracy",
                             "f1"]
    assert metrics["knowledge_accuracy"]["value"] == 0.5 and metrics["knowledge_accuracy"]["n"] == 2
    assert metrics["cloze_accuracy"]["value"] == 0.5 and metrics["cloze_accuracy"]["n"] == 2
    assert metrics["f1"]["value"] == 0.5 and metrics["f1"]["ci_low"] == 0.0 and metrics["f1"]["n"] == 3
    assert list(aggregate([])) == ["accuracy", "format_rate", "knowledge_accuracy", "lenient_accuracy"]
    assert aggregate([])["accuracy"] == {"value": None, "ci_low": None, "ci_high": None, "n": 0}


def test_metric_table_rows_are_whole():
    """A row per metric, each name once; a ratio's denominator and the f1 mean are no per-item outcome a paired
    test could compare."""
    from softeval.metrics import COMPARED, METRIC, METRIC_TABLE, METRICS

    assert len(set(METRICS)) == len(METRICS) == len(METRIC_TABLE) == len(METRIC)
    assert len({m.short for m in METRIC_TABLE}) == len(METRIC_TABLE)
    assert METRICS[:4] == tuple(m.name for m in METRIC_TABLE if m.every_run)
    assert all(not METRIC[m].mean for m in COMPARED)
    assert METRIC["knowledge_accuracy"].among == "format_ok" and METRIC["knowledge_accuracy"].field == "correct"
