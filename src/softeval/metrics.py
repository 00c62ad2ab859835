"""Per-item outcomes to aggregate metrics with 95% Wilson score intervals.

Definitions (docs/reference/metrics.md): accuracy = strict answer correct; format_rate = strict extractor found an
answer; knowledge_accuracy = correct among format-following items; lenient_accuracy = lenient
answer correct; letter_loglik_accuracy = argmax of the option letters' log-likelihood correct;
cloze_accuracy / cloze_accuracy_norm = argmax of each option text's summed log-likelihood (raw, and
divided by the option's length in characters) after the task's cloze prompt is correct;
permutation_consistency / circular_accuracy = the same option content chosen / the right option
chosen in every order of the options (multiple choice, ``--permutations``); f1 = the mean best token F1.

``METRIC_TABLE`` is the one table of them: a row each, in the order tables show them, read by the scoring
(``aggregate``), the runs index, ``compare``'s ``--metric``, the report and the command line's tables.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Metric:
    """One metric a run reports (results.json ``metrics.<name>``) and where it comes from."""

    name: str
    label: str  # its name in a sentence
    short: str  # its column in the terminal's tables
    field: str  # the sample field (samples.jsonl) that holds each item's outcome: the numerator
    among: str | None = None  # the denominator: the items whose ``among`` field is true (None: every item)
    mean: bool = False  # aggregated as a mean with a normal interval (a score per item), not a proportion (Wilson)
    every_run: bool = False  # every run has it (even over no items); the others where a sample has ``field``
    compared: bool = True  # `compare --metric` may name it: ranks and paired tests are over its per-item outcome
    higher_is_better: bool = True


# Every metric, in the order tables show them (the run's table, the report, the runs index, load_runs' columns).
# f1: the tasks that score token F1 (SQuAD, TriviaQA, task files with `matcher: f1`); the letter and cloze
# log-likelihoods: multiple choice; the last two: with --permutations.
METRIC_TABLE: tuple[Metric, ...] = (
    Metric("accuracy", "accuracy", "accuracy", "correct", every_run=True),
    Metric("format_rate", "format rate", "format", "format_ok", every_run=True),
    Metric("knowledge_accuracy", "knowledge accuracy", "knowledge", "correct", among="format_ok", every_run=True),
    Metric("lenient_accuracy", "lenient accuracy", "lenient", "lenient_correct", every_run=True),
    Metric("f1", "token F1", "f1", "f1", mean=True, compared=False),  # a score per item, no outcome to pair
    Metric("letter_loglik_accuracy", "letter log-likelihood accuracy", "letter ll", "letter_loglik_correct"),
    Metric("cloze_accuracy", "cloze accuracy", "cloze", "cloze_correct"),
    Metric("cloze_accuracy_norm", "cloze accuracy per character", "cloze norm", "cloze_norm_correct"),
    Metric("permutation_consistency", "permutation consistency", "perm. cons.", "permutation_consistent",
           compared=False),  # the same pick in every order, right or wrong: consistency, not correctness
    Metric("circular_accuracy", "circular accuracy", "circular", "circular_correct"),
)
METRICS = tuple(m.name for m in METRIC_TABLE)  # the names, in table order
METRIC = {m.name: m for m in METRIC_TABLE}  # name -> its row
COMPARED = tuple(m.name for m in METRIC_TABLE if m.compared)  # `compare --metric`'s choices


def _mean(values: Sequence[float]) -> dict:
    """A mean with its normal 95% interval, clipped to [0, 1]."""
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / max(1, len(values) - 1))
    half = Z95 * sd / math.sqrt(len(values))
    return {"value": mean, "ci_low": max(0.0, mean - half), "ci_high": min(1.0, mean + half), "n": len(values)}


def _of(metric: Metric, samples: Sequence[dict]) -> dict | None:
    """One metric of a list of samples; None where a metric not every run has has no item."""
    chosen = [s for s in samples if metric.among is None or s[metric.among]]
    if not metric.every_run:
        chosen = [s for s in chosen if s.get(metric.field) is not None]
        if not chosen:
            return None
    if metric.mean:
        return _mean([float(s[metric.field]) for s in chosen])
    return proportion([s[metric.field] for s in chosen])


def aggregate(samples: Sequence[dict]) -> dict:
    """Metrics of a list of samples (see docs/reference/run-format.md for the sample fields): the proportions in
    table order, then the means (results.json has always listed f1 last)."""
    metrics = {}
    for metric in sorted(METRIC_TABLE, key=lambda m: m.mean):
        value = _of(metric, samples)
        if value is not None:
            metrics[metric.name] = value
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
