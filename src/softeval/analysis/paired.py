"""Is one method better than another on the same model and the same items, beyond noise?

Two methods scored on the same items give a 2x2 table of per-item outcomes. Only the discordant
items (right under one method, wrong under the other) carry information about the difference:
McNemar's exact test asks whether they split evenly (a two-sided binomial test on them), and the
paired difference of accuracies gets Tango's (1998) asymptotic score interval: the differences that
McNemar's score test, asked at each of them, does not reject. Comparing the two accuracies as if they
came from different items (two Wilson intervals) would ignore the pairing and miss real differences.

Why Tango's and not Newcombe's (1998) method 10, which softeval used before: method 10 combines two
Wilson intervals through the phi correlation of the table, and when every pair agrees (phi = 1) the
two Wilson half-widths cancel, so its interval collapses: to [0, 0] at an accuracy of 1/2 under both
(n=10 with the same 5 right: [0.00, 0.00]; a --limit 2 run: [+0.00, +0.00]) and to a sliver
elsewhere, at any n. Tango's interval has positive width for every table (with no discordant item
it is +-z^2/(n + z^2): +-0.28 at n=10, +-0.04 at n=100); by exact enumeration its coverage stays at
about 95% or above at small n where method 10's falls to 0.77 (docs/reference/metrics.md, "Paired tests
between methods"); it stays inside [-1, 1]; and it is the inversion of McNemar's score test, so it cannot
contradict the test it stands beside: it excludes 0 exactly when McNemar's asymptotic test rejects
at 5%, and McNemar's exact p, the more conservative of the two, is below 0.05 only where it does
(tested for every split of up to 300 discordant items). Newcombe's method 11 (continuity-corrected
Wilson intervals and phi) also keeps a positive width, but its width comes from corrections the
test beside it does not share. The limits agree with Fagerland, Lydersen and Laake's
contingencytables (a test holds them to its published example).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from softeval.metrics import Z95


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


def _tango_statistic(b_only: int, a_only: int, n: int, delta: float) -> float:
    """McNemar's score statistic for "acc_B - acc_A = delta": (b_only - a_only - n*delta) over its
    standard error with P(A only) at its maximum-likelihood value under that delta (Tango 1998)."""
    quad_b = -b_only - a_only + (2 * n - b_only + a_only) * delta
    quad_c = -a_only * delta * (1 - delta)
    q = (math.sqrt(max(quad_b * quad_b - 8 * n * quad_c, 0.0)) - quad_b) / (4 * n)
    variance = n * (2 * q + delta * (1 - delta))
    gap = b_only - a_only - n * delta
    if variance <= 0:
        return 0.0 if gap == 0 else math.copysign(math.inf, gap)
    return gap / math.sqrt(variance)


def paired_difference_interval(both: int, a_only: int, b_only: int, neither: int,
                               z: float = Z95) -> tuple[float | None, float | None]:
    """Tango's (1998) asymptotic score interval for acc_B - acc_A from a paired 2x2 table: the deltas
    whose score statistic is within +-z. It depends on the discordant counts and n only."""
    from scipy.optimize import brentq  # lazy, as scipy.stats below

    n = both + a_only + b_only + neither
    if n == 0:
        return None, None
    estimate = (b_only - a_only) / n
    edge = 1e-12  # the statistic is infinite at +-1 itself

    def solve(target: float, low: float, high: float) -> float:
        return brentq(lambda d: _tango_statistic(b_only, a_only, n, d) - target, low, high, xtol=1e-12)

    low = -1.0 if a_only == n else solve(z, -1.0 + edge, estimate)
    high = 1.0 if b_only == n else solve(-z, estimate, 1.0 - edge)
    return max(-1.0, low), min(1.0, high)


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
