"""Ranking statistics: hand-computed tau and rho, the item bootstrap, and refusing bad input."""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from runfactory import Extras, Items, write_run
from scipy import stats

from softeval.analysis.compare import compare_runs, load_runs, parse_pairs
from softeval.analysis.ranking_stats import batched_rank_correlations
from softeval.cli import analysis as cli_analysis
from softeval.errors import UserError

PAIRS = [("base-1", "post-1"), ("base-2", "post-2"), ("base-3", "post-3"), ("base-4", "post-4")]


def _table(out: Path, base: dict[str, list[int]], post: list[int], n: int = 10) -> None:
    """Runs whose accuracies are exactly count/n: base[method][i] correct items for base model i."""
    for method, counts in base.items():
        for (b, _), k in zip(PAIRS, counts):
            write_run(out, b, "mmlu", method, [i < k for i in range(n)])
    for (_, p), k in zip(PAIRS, post):
        write_run(out, p, "mmlu", "zero-shot", [i < k for i in range(n)], extras=Extras(model_kind="post-trained"))


def test_tau_and_rho_equal_hand_computed_values(tmp_path: Path) -> None:
    # base zero-shot 0.1 0.4 0.3 0.5 vs post 0.2 0.5 0.6 0.7: of the 6 model pairs only (2,3) is
    # discordant, so tau = (5-1)/6 = 2/3; ranks 1 3 2 4 vs 1 2 3 4, sum d^2 = 2, rho = 1-6*2/(4*15) = 0.8.
    # few-shot 0.5 0.2 0.3 0.1: only (2,3) concordant, tau = -2/3; d = 3 0 0 -3, rho = 1-6*18/60 = -0.8.
    _table(tmp_path, {"zero-shot": [1, 4, 3, 5], "few-shot": [5, 2, 3, 1]}, [2, 5, 6, 7])
    runs, _ = load_runs(tmp_path)
    result = compare_runs(runs, PAIRS, n_boot=200)
    rows = {r.method: r for r in result.results}
    assert rows["zero-shot"].kendall_tau == pytest.approx(2 / 3)
    assert rows["zero-shot"].spearman_rho == pytest.approx(0.8)
    assert rows["few-shot"].kendall_tau == pytest.approx(-2 / 3)
    assert rows["few-shot"].spearman_rho == pytest.approx(-0.8)
    assert rows["zero-shot"].base_scores == {"base-1": 0.1, "base-2": 0.4, "base-3": 0.3, "base-4": 0.5}
    assert rows["zero-shot"].n_pairs == 4 and rows["zero-shot"].n_items == 10
    assert result.best_method["method"] == "zero-shot"
    average = {r.method: r for r in result.average}
    assert average["few-shot"].kendall_tau == pytest.approx(-2 / 3)


def test_batched_statistics_match_scipy_including_ties() -> None:
    rng = np.random.default_rng(1)
    xs = rng.integers(0, 4, size=(300, 5)).astype(float)  # few values: plenty of ties
    ys = rng.integers(0, 4, size=(300, 5)).astype(float)
    tau, rho = batched_rank_correlations(xs, ys)
    for k in range(len(xs)):
        want_tau = stats.kendalltau(xs[k], ys[k]).statistic
        with warnings.catch_warnings():  # scipy warns on constant rows; nan is the expected answer there
            warnings.simplefilter("ignore")
            want_rho = stats.spearmanr(xs[k], ys[k]).statistic
        np.testing.assert_allclose(tau[k], want_tau, equal_nan=True, atol=1e-12)
        np.testing.assert_allclose(rho[k], want_rho, equal_nan=True, atol=1e-12)


def _noisy_runs(out: Path, n: int) -> None:
    """Five pairs whose post ranking matches the base ranking except for one swap (true tau 0.8)."""
    rng = np.random.default_rng(7)
    base_rates = [0.2, 0.35, 0.5, 0.65, 0.8]
    post_rates = [0.3, 0.45, 0.7, 0.55, 0.85]
    for i, (b, p) in enumerate(zip(base_rates, post_rates)):
        write_run(out, f"base-{i}", "mmlu", "soft-prompt", list(rng.random(n) < b))
        write_run(out, f"post-{i}", "mmlu", "zero-shot", list(rng.random(n) < p),
                  extras=Extras(model_kind="post-trained"))


def test_bootstrap_interval_contains_the_estimate_and_shrinks_with_more_items(tmp_path: Path) -> None:
    widths = []
    for n in (40, 2000):
        _noisy_runs(tmp_path / str(n), n)
        runs, _ = load_runs(tmp_path / str(n))
        pairs = [(f"base-{i}", f"post-{i}") for i in range(5)]
        row = compare_runs(runs, pairs, n_boot=1000, seed=3).results[0]
        eps = 1e-9  # the point estimate is scipy's, the replicates are vectorised: same value, last bit aside
        assert row.ci_low - eps <= row.kendall_tau <= row.ci_high + eps
        assert row.spearman_ci_low - eps <= row.spearman_rho <= row.spearman_ci_high + eps
        widths.append((row.ci_high - row.ci_low, row.spearman_ci_high - row.spearman_ci_low))
    assert widths[1][0] < widths[0][0] / 2
    assert widths[1][1] < widths[0][1] / 2


def test_fewer_than_three_pairs_is_a_clear_error(tmp_path: Path) -> None:
    _table(tmp_path, {"zero-shot": [1, 4, 3, 5]}, [2, 5, 6, 7])
    runs, _ = load_runs(tmp_path)
    with pytest.raises(UserError, match="at least 3"):
        compare_runs(runs, PAIRS[:2])


def test_a_pair_naming_a_model_without_runs_is_refused(tmp_path: Path) -> None:
    _table(tmp_path, {"zero-shot": [1, 4, 3, 5]}, [2, 5, 6, 7])
    runs, _ = load_runs(tmp_path)
    with pytest.raises(UserError, match="no finished runs for model 'post-9'"):
        compare_runs(runs, [*PAIRS[:3], ("base-4", "post-9")])
    with pytest.raises(UserError, match="BASE=POST"):
        parse_pairs(["base-1"])


def test_different_item_sets_are_restricted_to_common_items_and_said_so(tmp_path: Path) -> None:
    _table(tmp_path, {"zero-shot": [1, 4, 3, 5]}, [2, 5, 6])
    ids = [f"mmlu/test/{i}" for i in range(2, 10)]  # post-4 never saw items 0 and 1
    write_run(tmp_path, "post-4", "mmlu", "zero-shot", [True] * 7 + [False], items=Items(ids=ids),
              extras=Extras(model_kind="post-trained"))
    runs, _ = load_runs(tmp_path)
    result = compare_runs(runs, PAIRS, n_boot=100)
    row = result.results[0]
    assert row.n_items == 8
    assert row.base_scores["base-1"] == 0.0  # its one correct item (0) is not common
    assert any("different item sets" in note and "8 items" in note for note in result.notes)


def test_post_method_missing_for_every_task_is_an_error_pointing_to_best(tmp_path: Path) -> None:
    _table(tmp_path, {"zero-shot": [1, 4, 3, 5]}, [2, 5, 6, 7])
    runs, _ = load_runs(tmp_path)
    with pytest.raises(UserError, match="try --post-method best"):
        compare_runs(runs, PAIRS, post_method="few-shot")
    assert compare_runs(runs, PAIRS, post_method="best", n_boot=50).results


def test_cli_compare_json_has_the_promised_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _table(tmp_path, {"zero-shot": [1, 4, 3, 5], "soft-prompt": [2, 5, 6, 7]}, [2, 5, 6, 7])
    parser = argparse.ArgumentParser()
    cli_analysis.register(parser.add_subparsers())
    args = parser.parse_args(["compare", str(tmp_path), "--json", "--n-boot", "100",
                              *[f"--pair={b}={p}" for b, p in PAIRS]])
    assert args.handler(args) == 0
    data = json.loads(capsys.readouterr().out)
    for row in data["results"] + data["average"]:
        assert {"task", "method", "kendall_tau", "spearman_rho", "ci_low", "ci_high", "n_pairs"} <= set(row)
    assert data["best_method"]["method"] == "soft-prompt"
    assert {r["method"]: r["kendall_tau"] for r in data["results"]}["soft-prompt"] == 1.0
