"""Per-item outcomes to aggregate metrics with 95% Wilson score intervals.

Definitions (docs/reference/metrics.md): accuracy = strict answer correct; format_rate = strict extractor found an
answer; knowledge_accuracy = correct among format-following items; lenient_accuracy = lenient
answer correct; letter_loglik_accuracy = argmax of the option letters' log-likelihood correct;
cloze_accuracy / cloze_accuracy_norm = argmax of each option text's summed log-likelihood (raw, and
divided by the option's length in characters) after the task's cloze prompt is correct;
permutation_consistency / circular_accuracy = the same option content chosen / the right option
chosen in every order of the options (multiple choice, ``--permutations``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

Z95 = 1.959963984540054
FOLLOWS_FORMAT = 0.90  # a format_rate of at least this: the model follows the format (tuning curve, verdicts)


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


# Optional per-item metrics: metric name -> the sample field holding the item's outcome.
ITEM_FIELDS = {
    "letter_loglik_accuracy": "letter_loglik_correct",
    "cloze_accuracy": "cloze_correct",
    "cloze_accuracy_norm": "cloze_norm_correct",
    "permutation_consistency": "permutation_consistent",
    "circular_accuracy": "circular_correct",
}


def aggregate(samples: Sequence[dict]) -> dict:
    """Metrics of a list of samples (see docs/reference/run-format.md for the sample fields)."""
    metrics = {
        "accuracy": proportion([s["correct"] for s in samples]),
        "format_rate": proportion([s["format_ok"] for s in samples]),
        "knowledge_accuracy": proportion([s["correct"] for s in samples if s["format_ok"]]),
        "lenient_accuracy": proportion([s["lenient_correct"] for s in samples]),
    }
    for name, key in ITEM_FIELDS.items():
        flags = [s[key] for s in samples if s.get(key) is not None]
        if flags:
            metrics[name] = proportion(flags)
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


KIND_SOURCES = {"preset": "preset", "flag": "--kind", "guessed from name": "guessed from name"}


def kind_label(kind: str | None, source: str | None) -> str:
    """A model's kind with where it came from, for tables: ``base (guessed from name)``. A guessed kind
    may be wrong (a post-trained model with an unusual name), so tables say when it was guessed."""
    if not kind:
        return ""
    return f"{kind} ({KIND_SOURCES.get(source, source)})" if source else kind


NO_ANSWER = "no answer"


def top_answer(results: dict, sep: str = " ") -> str | None:
    """The most frequent strict answer of a run and its share, e.g. ``"B 46/50"``: a label prior
    shows as one answer for most items. ``NO_ANSWER`` stands for "no answer found" (not ``none``, which a
    reader takes for an answer, and is one in some tasks); None when the run has no strict answer to count
    (no items)."""
    top = (results.get("answers") or {}).get("strict") or []
    if not top:
        return None
    answer, count = top[0]
    label = NO_ANSWER if answer is None else (answer if len(answer) <= 12 else answer[:11] + "…")
    return f"{label}{sep}{count}/{results['n']}"


def first_step_reaching(curve: Sequence[dict], key: str = "format_rate",
                        level: float = FOLLOWS_FORMAT) -> int | None:
    """The first logged step whose ``key`` is at least ``level`` (None if never)."""
    for point in curve:
        value = point.get(key)
        if value is not None and value >= level:
            return int(point["step"])
    return None
