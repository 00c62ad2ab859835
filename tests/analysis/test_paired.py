"""Paired tests between methods (softeval.analysis.paired, compare): McNemar's exact p and Tango's
paired score interval on hand-made tables, its width, coverage and agreement with the p beside it, and
`softeval compare` reporting them for runs without pairs."""

from __future__ import annotations

import argparse
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runfactory import demo_runs
from scipy.stats import binomtest

from softeval.analysis.compare import load_runs
from softeval.analysis.paired import _tango_statistic, mcnemar_exact, paired_difference_interval, paired_test
from softeval.analysis.pairs import paired_method_tests
from softeval.cli import analysis as cli_analysis
from softeval.metrics import Z95


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


def test_paired_interval_is_tangos_and_excludes_zero_only_for_a_clear_difference():
    low, high = paired_difference_interval(10, 2, 2, 10)
    assert low < 0 < high and high == pytest.approx(-low)
    low, high = paired_difference_interval(30, 0, 25, 45)  # B right on 25 more items of 100
    assert low > 0


def test_paired_interval_matches_the_published_example():
    """Fagerland, Lydersen and Laake's contingencytables, Tango's interval on Cavo et al. (2012): 6 and
    16 discordant pairs of 161, estimate -0.0621, 95% interval -0.1240 to -0.0054 (their p1 - p2 is
    our A - B, so the signs turn round). McNemar's exact p there is 0.052: the interval clears 0 and
    the exact test does not, the one way the two may part."""
    low, high = paired_difference_interval(59, 16, 6, 80)
    assert (round(low, 4), round(high, 4)) == (-0.1240, -0.0054)
    assert round(mcnemar_exact(16, 6), 6) == 0.052479


def test_paired_interval_never_collapses_when_every_pair_agrees():
    """Newcombe's method 10 gave [0, 0] here (the same 5 of 10 right under both; a --limit 2 run with
    one item right under both): Tango's has width +-z^2/(n + z^2)."""
    for both, neither in ((5, 5), (1, 1), (0, 2), (2, 0), (0, 1), (30, 0)):
        n = both + neither
        low, high = paired_difference_interval(both, 0, 0, neither)
        half = Z95**2 / (n + Z95**2)
        assert low == pytest.approx(-half, abs=1e-9) and high == pytest.approx(half, abs=1e-9)
    assert paired_difference_interval(5, 0, 0, 5)[1] > 0.27


def test_paired_interval_ends_are_where_the_score_test_rejects():
    """The interval inverts McNemar's score test: at each end the statistic is exactly -+z."""
    for both, a_only, b_only, neither in ((3, 1, 4, 2), (0, 0, 1, 0), (20, 3, 11, 6), (0, 5, 0, 0)):
        n = both + a_only + b_only + neither
        low, high = paired_difference_interval(both, a_only, b_only, neither)
        if low > -1:
            assert _tango_statistic(b_only, a_only, n, low) == pytest.approx(Z95, abs=1e-6)
        if high < 1:
            assert _tango_statistic(b_only, a_only, n, high) == pytest.approx(-Z95, abs=1e-6)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40), st.integers(0, 40), st.integers(0, 40))
def test_paired_interval_has_width_and_holds_its_estimate(both, a_only, b_only, neither):
    n = both + a_only + b_only + neither
    if n == 0:
        assert paired_difference_interval(0, 0, 0, 0) == (None, None)
        return
    test = paired_test("a", "b", *_outcomes(both, a_only, b_only, neither))
    assert -1 <= test.ci_low <= test.difference <= test.ci_high <= 1
    assert test.ci_high - test.ci_low > 0.03  # above 0.07 at any n below 100; never 0
    # the interval clears 0 exactly when McNemar's asymptotic test rejects, and the exact one never
    # rejects where the interval does not clear 0
    clear = test.ci_low > 0 or test.ci_high < 0
    discordant = a_only + b_only
    assert clear == (discordant > 0 and abs(b_only - a_only) / math.sqrt(discordant) > Z95)
    if test.p_value < 0.05:
        assert clear


def _outcomes(both: int, a_only: int, b_only: int, neither: int) -> tuple[dict, dict]:
    cells = [(1, 1)] * both + [(1, 0)] * a_only + [(0, 1)] * b_only + [(0, 0)] * neither
    return ({str(i): bool(x) for i, (x, _) in enumerate(cells)}, {str(i): bool(y) for i, (_, y) in enumerate(cells)})


def test_mcnemar_exact_rejects_only_where_the_interval_clears_zero():
    """For every split of up to 300 discordant items, at any n: exact p < 0.05 implies the score
    statistic at 0, (b - a) / sqrt(a + b), is beyond z, which is where the interval clears 0. The p
    rises with the smaller count, so the split that just rejects is the one to check."""
    for discordant in range(6, 301):  # below 6 the exact test never rejects
        low, high = 0, discordant // 2  # the largest smaller count whose p is below 0.05
        assert mcnemar_exact(0, discordant) < 0.05 <= mcnemar_exact(high, discordant - high)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if mcnemar_exact(mid, discordant - mid) < 0.05 else (low, mid)
        assert _tango_statistic(discordant - low, low, 1000, 0.0) > Z95
    assert mcnemar_exact(0, 5) > 0.05


def _coverage(n: int, p_a_only: float, p_b_only: float) -> float:
    """The exact probability that the interval holds the true difference, summed over every table of n
    pairs (Tango's interval depends on the discordant counts and n only)."""
    true, rest, total = p_b_only - p_a_only, 1 - p_a_only - p_b_only, 0.0
    for a_only in range(n + 1):
        for b_only in range(n + 1 - a_only):
            chance = (math.comb(n, a_only) * math.comb(n - a_only, b_only) * p_a_only**a_only
                      * p_b_only**b_only * rest ** (n - a_only - b_only))
            low, high = paired_difference_interval(n - a_only - b_only, a_only, b_only, 0)
            total += chance * (low - 1e-9 <= true <= high + 1e-9)
    return total


def test_paired_interval_keeps_its_coverage_at_small_n():
    """docs/reference/metrics.md's coverage table: over a grid of discordant probabilities the 95% interval
    holds the true difference 95% of the time or more on average, never below 94%, at n = 10 and 20."""
    grid = [(a, b) for a in (0.02, 0.05, 0.1, 0.2, 0.3) for b in (0.02, 0.05, 0.1, 0.2, 0.3, 0.5)]
    for n in (10, 20):
        cover = [_coverage(n, a, b) for a, b in grid]
        assert min(cover) >= 0.94 and sum(cover) / len(cover) >= 0.95


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


def test_two_methods_are_compared_on_the_lowest_seed_both_ran(tmp_path):
    """Zero-shot of seeds 0 and 1, the soft prompt of seed 1 only: seed 1 against seed 1 (once zero-shot's seed 0
    against the soft prompt's seed 1); with no seed in common each one's lowest, and the seeds are named where both
    methods read the seed (few-shot and soft-prompt: it picks the shots, the tuning pool), not for zero-shot."""
    from runfactory import Extras, write_run

    n = 20
    for seed, right in ((0, 2), (1, 5)):
        write_run(tmp_path, "m", "mmlu", "zero-shot", [i < right for i in range(n)], seed=seed,
                  extras=Extras(config={"seed": seed, "method": "zero-shot"}))
    write_run(tmp_path, "m", "mmlu", "soft-prompt", [i < 10 for i in range(n)], seed=1,
              extras=Extras(config={"seed": 1, "method": "soft-prompt"}))
    (row,) = paired_method_tests(load_runs(tmp_path)[0])
    assert (row.test.accuracy_a, row.test.accuracy_b, row.differs) == (0.25, 0.5, ())
    assert [r.seed for r in row.runs] == [1, 1]
    other = tmp_path / "other"
    write_run(other, "m", "mmlu", "few-shot", [False] * n, seed=0,
              extras=Extras(config={"seed": 0, "method": "few-shot"}))
    write_run(other, "m", "mmlu", "zero-shot", [False] * n, seed=0,
              extras=Extras(config={"seed": 0, "method": "zero-shot"}))
    write_run(other, "m", "mmlu", "soft-prompt", [True] * n, seed=2,
              extras=Extras(config={"seed": 2, "method": "soft-prompt"}))
    rows = paired_method_tests(load_runs(other)[0])
    differs = {({r.test.a, r.test.b} - {"soft-prompt"}).pop(): r.differs for r in rows}
    assert differs == {"few-shot": ("seed: 0 -> 2",), "zero-shot": ()}
