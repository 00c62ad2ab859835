"""How much a method's score moves with the prompt's format: its spread across prompt variants (tasks/variants.py).

For each (model, task, method, seed) scored under two or more prompt variants on the same items, ``spreads`` gives
the mean, min, max and standard deviation across variants of accuracy and of format_rate. ``spread_tests`` asks, for
the treatment (the soft prompt) against each method it is compared with (``methods.compared``), whether its accuracy
spreads less: the difference of the two standard deviations across variants, with a 95% percentile bootstrap
interval over items (each resample draws items, and every variant of both methods is rescored on those items, so
the variants stay paired) and the share of resamples on the other side of 0. ``sentence`` says what a test shows in
words, and claims a difference only where the interval excludes 0 on enough variants and items
(docs/reference/verdicts.md, "Spread across prompt variants").
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from softeval import methods
from softeval.analysis.compare import item_outcomes
from softeval.store.format import Run

MIN_VARIANTS = 3  # a spread is compared on at least this many prompt variants ...
MIN_ITEMS = 20  # ... scored on at least this many shared items (below it a bootstrap interval is too narrow)
BOOTSTRAP = 2000  # resamples of the items
SEED = 0  # the bootstrap's seed: the same runs give the same interval
METRICS = ("accuracy", "format_rate")


@dataclass(frozen=True)
class Stats:
    """One metric across variants: its value per variant (in variant order) and their mean, min, max and sample
    standard deviation (None for one variant)."""

    values: tuple[float, ...]
    mean: float
    low: float
    high: float
    std: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats:
        values = tuple(float(v) for v in values)
        std = float(np.std(values, ddof=1)) if len(values) > 1 else None
        return cls(values, float(np.mean(values)), min(values), max(values), std)


@dataclass(frozen=True)
class Spread:
    """One (model, task, method, seed) across the prompt variants it was scored under."""

    model: str
    task: str
    method: str
    seed: int
    variants: tuple[int, ...]
    n: int  # items each variant scored (the fewest, where they differ)
    accuracy: Stats
    format_rate: Stats

    def row(self) -> dict:
        """The spread as one flat record (results.spread's DataFrame, compare --json)."""
        out = {"model": self.model, "task": self.task, "method": self.method, "seed": self.seed,
               "variants": list(self.variants), "k": len(self.variants), "n": self.n}
        for name in METRICS:
            stats = getattr(self, name)
            out.update({f"{name}_mean": stats.mean, f"{name}_min": stats.low, f"{name}_max": stats.high,
                        f"{name}_std": stats.std, f"{name}_values": list(stats.values)})
        return out


@dataclass(frozen=True)
class SpreadTest:
    """Does ``method``'s accuracy spread less across variants than ``baseline``'s? ``difference``: the method's
    standard deviation minus the baseline's, on the ``n`` items and ``k`` variants both scored; its 95% bootstrap
    interval [``low``, ``high``] and ``p``, twice the share of resamples on the far side of 0, counted as (count + 1) /
    (resamples + 1), so never 0 (at least 2 / 2,001 with 2,000 resamples; at most 1)."""

    model: str
    task: str
    seed: int
    method: str
    baseline: str
    k: int
    n: int
    std: float
    baseline_std: float
    difference: float
    low: float
    high: float
    p: float

    @property
    def compared(self) -> bool:
        """Whether enough variants and items were scored for the test to speak (MIN_VARIANTS, MIN_ITEMS); what it then
        shows, if anything, is its sentence."""
        return self.k >= MIN_VARIANTS and self.n >= MIN_ITEMS

    @property
    def sentence(self) -> str:
        return sentence(self)

    def row(self) -> dict:
        return {**asdict(self), "compared": self.compared, "sentence": self.sentence}


def sentence(test: SpreadTest) -> str:
    """What the test shows, in words: a smaller (or larger) spread only where the interval excludes 0 on at least
    MIN_VARIANTS variants and MIN_ITEMS items; otherwise that no difference is shown, and why."""
    who, other = _who(test.method), _who(test.baseline)
    numbers = (f"std {test.std:.3f} vs {test.baseline_std:.3f} across {test.k} prompt variants, difference "
               f"{test.difference:+.3f} [{test.low:+.3f}, {test.high:+.3f}], n={test.n}")
    if test.k < MIN_VARIANTS:
        return (f"spread not compared: {test.k} prompt variant{'s' * (test.k != 1)} of {test.method} and "
                f"{test.baseline} (it takes {MIN_VARIANTS} or more)")
    if test.n < MIN_ITEMS:
        return (f"spread not compared: {test.n} shared item{'s' * (test.n != 1)} (it takes {MIN_ITEMS} or more to "
                f"resample); {numbers}")
    if test.high < 0:
        return f"{_owning(who)} accuracy moves less with the prompt's format than {_owning(other)}: {numbers}"
    if test.low > 0:
        return f"{_owning(who)} accuracy moves more with the prompt's format than {_owning(other)}: {numbers}"
    return f"no difference in spread shown between {who} and {other} (the interval includes 0): {numbers}"


def _owning(who: str) -> str:
    """The possessive of a method's name in words: "the soft prompt's", "the shots'" (a plural in -s takes '
    alone)."""
    return f"{who}'" if who.endswith("s") else f"{who}'s"


def _who(method: str) -> str:
    return methods.spec_of(method).who if methods.known(method) else method


def _groups(runs: Sequence[Run]) -> dict[tuple[str, str, str, int], dict[int, Run]]:
    """(model, task, method, seed) -> {variant: run}, over every run of a finished root."""
    found: dict[tuple[str, str, str, int], dict[int, Run]] = defaultdict(dict)
    for run in runs:
        found[(run.model_key, run.base_task, run.method, run.seed)][run.variant] = run
    return found


def spreads(runs: Sequence[Run]) -> list[Spread]:
    """The spread of every (model, task, method, seed) scored under two or more prompt variants."""
    out = []
    for (model, task, method, seed), by_variant in sorted(_groups(runs).items(), key=lambda kv: _order(kv[0])):
        if len(by_variant) < 2:
            continue
        variants = tuple(sorted(by_variant))
        chosen = [by_variant[v] for v in variants]
        stats = {name: Stats.of([_value(r, name) for r in chosen]) for name in METRICS}
        out.append(Spread(model, task, method, seed, variants, min(int(r.results["n"]) for r in chosen),
                          stats["accuracy"], stats["format_rate"]))
    return out


def _order(key: tuple[str, str, str, int]) -> tuple:
    """Groups as tables list them: by model, task, then methods in the registry's order, then seed."""
    model, task, method, seed = key
    names = methods.names()
    return model, task, names.index(method) if method in names else len(names), method, seed


def _value(run: Run, name: str) -> float:
    metric = run.metric(name)
    value = metric.get("value") if metric else None
    return float(value) if value is not None else math.nan


def spread_tests(runs: Sequence[Run], boots: int = BOOTSTRAP, seed: int = SEED) -> list[SpreadTest]:
    """The treatment against each method it is compared with, per (model, task, seed) where both were scored under
    the same two or more prompt variants, on the items every one of those runs scored."""
    groups = _groups(runs)
    out = []
    for (model, task, method, run_seed), treated in sorted(groups.items(), key=lambda kv: _order(kv[0])):
        if not methods.known(method) or methods.spec_of(method).role != methods.TREATMENT:
            continue
        for baseline in methods.compared():
            other = groups.get((model, task, baseline, run_seed))
            if other is None:
                other = _any_seed(groups, model, task, baseline)  # a method that reads no seed ran once
            if other is None:
                continue
            variants = sorted(set(treated) & set(other))
            if len(variants) < 2:
                continue
            test = spread_test([treated[v] for v in variants], [other[v] for v in variants], boots, seed)
            if test is not None:
                out.append(test)
    return out


def _any_seed(groups: dict, model: str, task: str, method: str) -> dict[int, Run] | None:
    """The runs of a method that reads no seed (zero-shot), whichever seed they were written under."""
    if methods.known(method) and methods.spec_of(method).reads_option("seed"):
        return None
    found = sorted(((k, v) for k, v in groups.items() if k[:3] == (model, task, method)), key=lambda kv: kv[0][3])
    return found[0][1] if found else None


def spread_test(treated: Sequence[Run], baseline: Sequence[Run], boots: int = BOOTSTRAP,
                seed: int = SEED) -> SpreadTest | None:
    """``treated[i]`` and ``baseline[i]`` are one method each under the same variant i; None when they share no
    item."""
    if len(treated) < 2 or len(treated) != len(baseline):
        return None
    outcomes = [item_outcomes(r) for r in (*treated, *baseline)]
    shared = sorted(set.intersection(*(set(o) for o in outcomes)))
    if not shared:
        return None
    k = len(treated)
    matrix = np.array([[o[i] for i in shared] for o in outcomes], dtype=float)  # (2k, n)
    mine, theirs = matrix[:k], matrix[k:]
    point = _std(mine.mean(1)) - _std(theirs.mean(1))
    rng = np.random.default_rng(seed)
    n = len(shared)
    diffs = np.empty(boots)
    for b in range(boots):
        pick = rng.integers(0, n, n)
        diffs[b] = _std(mine[:, pick].mean(1)) - _std(theirs[:, pick].mean(1))
    low, high = (float(x) for x in np.percentile(diffs, [2.5, 97.5]))
    far = min(int(np.sum(diffs <= 0)), int(np.sum(diffs >= 0)))
    p = min(1.0, 2 * (far + 1) / (boots + 1))  # a bootstrap p is never 0: the resamples bound it (Davison-Hinkley)
    first = treated[0]
    return SpreadTest(first.model_key, first.base_task, first.seed, first.method, baseline[0].method, k, n,
                      _std(mine.mean(1)), _std(theirs.mean(1)), float(point), low, high, p)


def _std(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1))
