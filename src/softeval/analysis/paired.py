"""Is one method better than another on the same model and the same items, beyond noise?

Two methods scored on the same items give a 2x2 table of per-item outcomes. Only the discordant
items (right under one method, wrong under the other) carry information about the difference:
McNemar's exact test asks whether they split evenly (a two-sided binomial test on them), and the
paired difference of accuracies gets Newcombe's score interval (his method 10), which, unlike the
Wald interval, stays inside [-1, 1] and behaves at small counts. Comparing the two accuracies as if
they came from different items (two Wilson intervals) would ignore the pairing and miss real
differences.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from softeval.metrics import Z95, wilson


@dataclass(frozen=True)
class PairedTest:
    """Method B against method A on ``n`` shared items (``b_only``: right under B alone)."""

    a: str
    b: str
    n: int
    both: int
    a_only: int
    b_only: int
    neither: int
    accuracy_a: float | None
    accuracy_b: float | None
    difference: float | None  # accuracy_b - accuracy_a
    ci_low: float | None
    ci_high: float | None
    p_value: float | None  # McNemar's exact (binomial) test, two-sided

    def to_json(self) -> dict:
        return asdict(self)


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value: the discordant items as a binomial test with p = 1/2."""
    from scipy.stats import binomtest  # lazy: scipy.stats is slow to import

    discordant = a_only + b_only
    if discordant == 0:
        return 1.0
    return float(binomtest(min(a_only, b_only), discordant, 0.5, alternative="two-sided").pvalue)


def paired_difference_interval(both: int, a_only: int, b_only: int, neither: int,
                               z: float = Z95) -> tuple[float | None, float | None]:
    """Newcombe's (1998) method-10 interval for acc_B - acc_A from a paired 2x2 table."""
    n = both + a_only + b_only + neither
    if n == 0:
        return None, None
    p_a, p_b = (both + a_only) / n, (both + b_only) / n
    l_a, u_a = wilson(both + a_only, n, z)
    l_b, u_b = wilson(both + b_only, n, z)
    denom = (both + a_only) * (b_only + neither) * (both + b_only) * (a_only + neither)
    phi = (both * neither - a_only * b_only) / math.sqrt(denom) if denom > 0 else 0.0
    diff = p_b - p_a
    delta = math.sqrt(max(0.0, (p_b - l_b) ** 2 - 2 * phi * (p_b - l_b) * (u_a - p_a) + (u_a - p_a) ** 2))
    eps = math.sqrt(max(0.0, (u_b - p_b) ** 2 - 2 * phi * (u_b - p_b) * (p_a - l_a) + (p_a - l_a) ** 2))
    return max(-1.0, diff - delta), min(1.0, diff + eps)


def paired_test(a: str, b: str, outcomes_a: Mapping[str, bool], outcomes_b: Mapping[str, bool]) -> PairedTest:
    """Compare B with A on the items both were scored on (matched by item id)."""
    shared = [i for i in outcomes_a if i in outcomes_b]
    both = sum(1 for i in shared if outcomes_a[i] and outcomes_b[i])
    a_only = sum(1 for i in shared if outcomes_a[i] and not outcomes_b[i])
    b_only = sum(1 for i in shared if outcomes_b[i] and not outcomes_a[i])
    n = len(shared)
    neither = n - both - a_only - b_only
    low, high = paired_difference_interval(both, a_only, b_only, neither)
    acc_a = (both + a_only) / n if n else None
    acc_b = (both + b_only) / n if n else None
    return PairedTest(a, b, n, both, a_only, b_only, neither, acc_a, acc_b,
                      None if not n else acc_b - acc_a, low, high, mcnemar_exact(a_only, b_only) if n else None)
