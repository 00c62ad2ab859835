"""Paired tests between methods (softeval.analysis.paired, compare): McNemar's exact p and Newcombe's
paired interval on hand-made tables, and `softeval compare` reporting them for runs without pairs."""

from __future__ import annotations

import argparse
import json

import pytest
from runfactory import demo_runs
from scipy.stats import binomtest

from softeval.analysis.compare import load_runs, paired_method_tests
from softeval.analysis.paired import mcnemar_exact, paired_difference_interval, paired_test
from softeval.cli import analysis as cli_analysis


def test_mcnemar_p_equals_scipy_on_a_hand_made_table():
    # 40 items: 20 right under both, 3 only under A, 11 only under B, 6 under neither.
    ids = [f"i{k}" for k in range(40)]
    a = dict(zip(ids, [True] * 20 + [True] * 3 + [False] * 11 + [False] * 6))
    b = dict(zip(ids, [True] * 20 + [False] * 3 + [True] * 11 + [False] * 6))
    test = paired_test("zero-shot", "soft-prompt", a, b)
    assert (test.both, test.a_only, test.b_only, test.neither) == (20, 3, 11, 6)
    assert test.p_value == pytest.approx(binomtest(3, 14, 0.5).pvalue, rel=1e-12)
    assert test.difference == pytest.approx(0.2)
    assert test.ci_low < 0.2 < test.ci_high and -1 <= test.ci_low and test.ci_high <= 1
    assert mcnemar_exact(0, 0) == 1.0


def test_paired_interval_is_newcombes_and_excludes_zero_only_for_a_clear_difference():
    low, high = paired_difference_interval(10, 2, 2, 10)
    assert low < 0 < high and high == pytest.approx(-low)
    low, high = paired_difference_interval(30, 0, 25, 45)  # B right on 25 more items of 100
    assert low > 0


def test_compare_reports_paired_tests_without_pairs(tmp_path, capsys):
    demo_runs(tmp_path, n=40)
    runs, _ = load_runs(tmp_path)
    rows = paired_method_tests(runs)
    assert {(r.test.a, r.test.b) for r in rows} == {("zero-shot", "soft-prompt"), ("few-shot", "soft-prompt")}
    assert all(r.test.n == 40 for r in rows)
    parser = argparse.ArgumentParser()
    cli_analysis.register(parser.add_subparsers())
    args = parser.parse_args(["compare", str(tmp_path), "--json"])
    assert args.handler(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["paired_tests"]) == 8
    assert {"p_value", "ci_low", "difference"} <= set(data["paired_tests"][0])
    args = parser.parse_args(["compare", str(tmp_path)])
    assert args.handler(args) == 0
    assert "McNemar" in capsys.readouterr().out
