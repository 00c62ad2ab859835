"""Planted per-item scores of testbed worlds (no model, no run folder), for the statistics and the report."""

import numpy as np

from softeval.analysis.ranking_stats import ItemScores
from softeval.testbed.recipes import FORMAT_LITTLE, NEVER_SAW, Recipe
from softeval.testbed.stats import WorldScores

N = 60
RECIPES = (Recipe("a", 1.0, 1, 1, 0.0), Recipe("b", 0.7, 1, 1, 0.0), Recipe("c", 0.4, 1, 1, 0.0),
           Recipe("fmt", 0.1, 1, 1, 0.5, control=FORMAT_LITTLE), Recipe("never", 0.0, 1, 1, 0.0, control=NEVER_SAW))


def items(rate: float, seed: int) -> ItemScores:
    rng = np.random.default_rng(seed)
    num = (rng.random(N) < rate).astype(float)
    return ItemScores([f"i{k}" for k in range(N)], num, np.ones(N))


def world(seed: int, method_rates: dict[str, list[float]], post: list[float], seen: list[float]) -> WorldScores:
    k = len(post)
    return WorldScores(seed, [r.name for r in RECIPES][:k],
                       {m: [items(r, seed * 100 + i) for i, r in enumerate(rs)] for m, rs in method_rates.items()},
                       [items(r, seed * 100 + 50 + i) for i, r in enumerate(post)],
                       {t: [items(r, seed * 100 + 70 + i) for i, r in enumerate(seen)] for t in ("seen", "cloze")})


TRUE = [0.9, 0.7, 0.5, 0.2, 0.0]
