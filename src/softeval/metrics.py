"""Per-item outcomes to aggregate metrics with 95% Wilson score intervals.

Definitions (DESIGN.md): accuracy = strict answer correct; format_rate = strict extractor found an
answer; knowledge_accuracy = correct among format-following items; lenient_accuracy = lenient
answer correct; loglik_accuracy = argmax option log-likelihood correct (multiple choice).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

Z95 = 1.959963984540054


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float | None, float | None]:
    """Wilson score interval: well-behaved at 0 and 1 and for small n, unlike the normal one."""
    if n == 0:
        return None, None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At 0 of n (n of n) the bound is exactly 0 (1); rounding would leave a 1e-17 there.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def proportion(flags: Sequence[bool]) -> dict:
    n, k = len(flags), sum(bool(f) for f in flags)
    low, high = wilson(k, n)
    return {"value": (k / n) if n else None, "ci_low": low, "ci_high": high, "n": n}


def aggregate(samples: Sequence[dict]) -> dict:
    """Metrics of a list of samples (see docs/run-format.md for the sample fields)."""
    metrics = {
        "accuracy": proportion([s["correct"] for s in samples]),
        "format_rate": proportion([s["format_ok"] for s in samples]),
        "knowledge_accuracy": proportion([s["correct"] for s in samples if s["format_ok"]]),
        "lenient_accuracy": proportion([s["lenient_correct"] for s in samples]),
    }
    if samples and "loglik_correct" in samples[0]:
        metrics["loglik_accuracy"] = proportion([s["loglik_correct"] for s in samples])
    if samples and "f1" in samples[0]:
        values = [float(s["f1"]) for s in samples]
        mean = sum(values) / len(values)
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / max(1, len(values) - 1))
        half = Z95 * sd / math.sqrt(len(values))
        metrics["f1"] = {"value": mean, "ci_low": max(0.0, mean - half), "ci_high": min(1.0, mean + half),
                         "n": len(values)}
    return metrics


def answer_counts(samples: Sequence[dict], top: int = 5) -> dict:
    """The most frequent strict answers and gold answers, ``[[answer, count], ...]`` (no answer is
    ``None``). A tuned prompt that learned only a label prior (one letter for every item) shows here
    as one answer with most of the items while the gold answers are spread out."""
    def most_common(values):
        return [[value, count] for value, count in Counter(values).most_common(top)]

    return {"strict": most_common(s["strict"] for s in samples),
            "gold": most_common(str(s["gold"]) for s in samples)}


def top_answer(results: dict, sep: str = " ") -> str | None:
    """The most frequent strict answer of a run and its share, e.g. ``"B 46/50"``: a label prior
    shows as one answer for most items. ``"none"`` stands for "no answer found"; None when the
    results have no ``answers`` (runs written before softeval recorded them)."""
    top = (results.get("answers") or {}).get("strict") or []
    if not top:
        return None
    answer, count = top[0]
    label = "none" if answer is None else (answer if len(answer) <= 12 else answer[:11] + "…")
    return f"{label}{sep}{count}/{results['n']}"


def first_step_reaching(curve: Sequence[dict], key: str = "format_rate", level: float = 0.9) -> int | None:
    """The first logged step whose ``key`` is at least ``level`` (None if never)."""
    for point in curve:
        value = point.get(key)
        if value is not None and value >= level:
            return int(point["step"])
    return None
