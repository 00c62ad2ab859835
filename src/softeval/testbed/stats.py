"""The testbed's numbers: per method, Kendall tau and Spearman rho between the base models' scores and
(a) their post-trained partners' scores, (b) the ground truth (the share of scored facts each model was
trained on; its cloze score), with percentile bootstrap intervals over items (every model rescored on the
same resampled facts, as `softeval compare` does) and over world seeds (the worlds resampled). The rank
statistics are analysis/ranking_stats.py's; this module only decides what is correlated with what."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from softeval.analysis.ranking_stats import (
    ItemScores,
    batched_rank_correlations,
    bootstrap_scores,
    percentile_interval,
    rank_correlations,
)

TRUTHS = ("seen", "cloze")  # the ground truth: share of scored facts trained on; cloze score of the base
TARGETS = ("post", *TRUTHS)


@dataclass
class WorldScores:
    """One world: per recipe (in order) the base model's items per method, its partner's zero-shot items
    and its ground truth per item, all over the same scored facts."""

    seed: int
    recipes: list[str]
    base: dict[str, list[ItemScores]]  # method -> one per recipe
    post: list[ItemScores]
    truth: dict[str, list[ItemScores]]  # "seen" / "cloze" -> one per recipe

    def target(self, name: str) -> list[ItemScores]:
        return self.post if name == "post" else self.truth[name]


def _interval(values: np.ndarray) -> list[float] | None:
    lo, hi = percentile_interval(values)
    return None if lo is None else [round(lo, 4), round(hi, 4)]


def _round(x: float) -> float | None:
    return None if not np.isfinite(x) else round(float(x), 4)


def method_correlations(worlds: list[WorldScores], method: str, n_boot: int, seed: int = 0) -> dict:
    """For one method: per target (post, seen, cloze) the mean over worlds of tau and rho, the tau
    interval over items (replicate r of every world averaged) and over world seeds, and each world's tau."""
    rng = np.random.default_rng(seed)
    out: dict = {}
    per_world_boot: dict[str, list[np.ndarray]] = {t: [] for t in TARGETS}
    points: dict[str, list[tuple[float, float]]] = {t: [] for t in TARGETS}
    for world in worlds:
        bases = world.base[method]
        k = len(bases)
        columns = bases + [s for t in TARGETS for s in world.target(t)]
        common = [i for i in columns[0].ids if all(i in set(c.ids) for c in columns[1:])]
        aligned = [c.aligned(common) for c in columns]
        boot = bootstrap_scores(aligned, n_boot, rng)
        x = [c.score() for c in aligned[:k]]
        for n, t in enumerate(TARGETS):
            target = aligned[k * (n + 1):k * (n + 2)]
            points[t].append(rank_correlations(x, [c.score() for c in target]))
            tau, _ = batched_rank_correlations(boot[:, :k], boot[:, k * (n + 1):k * (n + 2)])
            per_world_boot[t].append(tau)
    for t in TARGETS:
        taus = np.array([p[0] for p in points[t]], dtype=float)
        rhos = np.array([p[1] for p in points[t]], dtype=float)
        with warnings.catch_warnings():  # a world without a ranking (all scores tied) is nan, an answer here
            warnings.simplefilter("ignore", RuntimeWarning)
            items = np.nanmean(np.vstack(per_world_boot[t]), axis=0)
            mean_tau = float(np.nanmean(taus)) if np.isfinite(taus).any() else float("nan")
            mean_rho = float(np.nanmean(rhos)) if np.isfinite(rhos).any() else float("nan")
        seeds = None
        if len(worlds) >= 2 and np.isfinite(taus).all():
            picks = rng.integers(0, len(worlds), size=(n_boot, len(worlds)))
            seeds = _interval(taus[picks].mean(axis=1))
        out[t] = {"kendall_tau": _round(mean_tau), "spearman_rho": _round(mean_rho),
                  "tau_ci_items": _interval(items), "tau_ci_world_seeds": seeds,
                  "tau_per_world": [_round(v) for v in taus]}
    return out


def variant_stability(per_variant: list[list[WorldScores]]) -> dict:
    """How far each method's ranking of the base models moves with the prompt's format (tasks/variants.py):
    ``per_variant[v]`` holds every world scored under prompt variant v. Per method, ``stability``: the mean over
    worlds and over pairs of variants of the Kendall tau between the rankings under the two variants (1: the same
    ranking whatever the format; None with one variant), over the ``stability_pairs`` pairs that have a tau, and
    ``pairs_all_tied``: the pairs left out because one ranking was all ties (every model scored the same: no
    ranking to compare); ``tau_post_per_variant``: the tau against the post-trained ranking under each variant (mean
    over worlds; None where every world's ranking was all ties), with its mean, min, max and standard deviation
    across the variants that have one; ``score_per_variant``: the mean score of the base models under each variant
    (over worlds and models), which says under which format the method's scores collapse."""
    k = len(per_variant)
    out: dict = {"k": k, "methods": {}}
    for method in per_variant[0][0].base:
        scores = [[[s.score() for s in world.base[method]] for world in worlds] for worlds in per_variant]
        posts = [[s.score() for s in world.post] for world in per_variant[0]]
        pairs = [rank_correlations(scores[a][w], scores[b][w])[0]
                 for a in range(k) for b in range(a + 1, k) for w in range(len(posts))]
        vs_post = [_nanmean([rank_correlations(scores[v][w], posts[w])[0] for w in range(len(posts))])
                   for v in range(k)]
        finite = [t for t in vs_post if t is not None]
        ranked = [t for t in pairs if np.isfinite(t)]  # rank_correlations: nan where a ranking is all ties
        out["methods"][method] = {
            "stability": _nanmean(ranked),
            "stability_pairs": len(ranked),
            "pairs_all_tied": len(pairs) - len(ranked),
            "tau_post_per_variant": vs_post,
            "tau_post_mean": _nanmean(finite) if finite else None,
            "tau_post_min": min(finite) if finite else None,
            "tau_post_max": max(finite) if finite else None,
            "tau_post_std": _round(float(np.std(finite, ddof=1))) if len(finite) > 1 else None,
            "score_per_variant": [_nanmean([x for world in worlds for x in world]) for worlds in scores],
        }
    return out


def _nanmean(values: list[float | None]) -> float | None:
    """The mean of the finite values, rounded (a ranking of tied scores has no tau: left out); None without any."""
    finite = [v for v in values if v is not None and np.isfinite(v)]
    return _round(float(np.mean(finite))) if finite else None
