"""Rank-correlation statistics for compare: scipy's Kendall tau-b and Spearman rho, a vectorised
version of both for bootstrap replicates, the paired item bootstrap itself, and percentile intervals.

Kept apart from compare.py (which decides *what* to correlate: pairs, tasks, methods, common items)
so the numbers can be checked against scipy and by hand without any run folders.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

_CHUNK_CELLS = 4_000_000  # replicate x item indices held at once, so 14k-item MMLU stays small


@dataclass
class ItemScores:
    """Per-item numerator and denominator of a metric for one model/task/method, seeds averaged."""

    ids: list[str]
    num: np.ndarray
    den: np.ndarray

    def aligned(self, common: Sequence[str]) -> ItemScores:
        where = {item: i for i, item in enumerate(self.ids)}
        pick = np.array([where[item] for item in common], dtype=np.int64)
        return ItemScores(list(common), self.num[pick], self.den[pick])

    def score(self) -> float:
        den = self.den.sum()
        return float(self.num.sum() / den) if den > 0 else float("nan")


def rank_correlations(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Kendall tau-b and Spearman rho from scipy.stats (nan when either side is constant)."""
    if len(set(x)) < 2 or len(set(y)) < 2:
        return float("nan"), float("nan")
    return float(stats.kendalltau(x, y).statistic), float(stats.spearmanr(x, y).statistic)


def batched_rank_correlations(xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise Kendall tau-b and Spearman rho for (replicates, models) arrays, equal to scipy's.

    Bootstrapping calls these thousands of times per task and method; vectorising keeps a whole
    compare under a second. tau-b = sum(sx*sy)/sqrt(sum(sx^2) sum(sy^2)) over model pairs, with s the
    sign of the pairwise difference (ties drop out exactly as in tau-b).
    """
    i, j = np.triu_indices(xs.shape[1], k=1)
    sx, sy = np.sign(xs[:, i] - xs[:, j]), np.sign(ys[:, i] - ys[:, j])
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = (sx * sy).sum(1) / np.sqrt((sx * sx).sum(1) * (sy * sy).sum(1))
        rx = stats.rankdata(xs, axis=1) - (xs.shape[1] + 1) / 2
        ry = stats.rankdata(ys, axis=1) - (ys.shape[1] + 1) / 2
        rho = (rx * ry).sum(1) / np.sqrt((rx * rx).sum(1) * (ry * ry).sum(1))
    nan_rows = np.isnan(xs).any(1) | np.isnan(ys).any(1)
    tau[nan_rows], rho[nan_rows] = np.nan, np.nan
    return tau, rho


def bootstrap_scores(items: list[ItemScores], n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, len(items)) scores, every model rescored on the same resampled item indices."""
    n = len(items[0].ids)
    out = np.empty((n_boot, len(items)))
    step = max(1, _CHUNK_CELLS // max(n, 1))
    for start in range(0, n_boot, step):
        idx = rng.integers(0, n, size=(min(step, n_boot - start), n))
        for k, it in enumerate(items):
            with np.errstate(invalid="ignore", divide="ignore"):
                out[start:start + len(idx), k] = it.num[idx].sum(1) / it.den[idx].sum(1)
    return out


# Fewest bootstrap replicates a run of compare/report accepts: the 2.5th and 97.5th percentiles of
# fewer are the extremes of a handful of draws, not an interval (2000 is the default).
MIN_BOOT = 50


def percentile_interval(boot: np.ndarray) -> tuple[float | None, float | None]:
    finite = boot[np.isfinite(boot)]
    if len(finite) < max(10, len(boot) // 2):  # mostly degenerate replicates: no honest interval
        return None, None
    lo, hi = np.percentile(finite, [2.5, 97.5])
    return float(lo), float(hi)
