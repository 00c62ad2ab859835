"""Paired tests of two methods on one model and task: the runs compared (one seed, the lowest both methods ran:
pair_of), McNemar's exact test and Tango's interval on the items both scored (analysis/paired.py), and what besides
the method sets the two runs apart (store.identity.setting_diff), which the verdicts and `softeval compare` name."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from softeval import methods
from softeval.analysis.compare import item_outcomes, json_safe
from softeval.analysis.paired import PairedTest, paired_test
from softeval.errors import UserError, shown
from softeval.metrics import COMPARED
from softeval.store.format import Run
from softeval.store.identity import setting_diff


def runs_by_seed(runs: Sequence[Run]) -> dict[tuple[str, str, str], dict[int, Run]]:
    """Per (task, model, method) its runs by seed."""
    found: dict[tuple[str, str, str], dict[int, Run]] = {}
    for run in runs:
        found.setdefault((run.task, run.model_key, run.method), {}).setdefault(run.seed, run)
    return found


def pair_of(a: dict[int, Run], b: dict[int, Run]) -> tuple[Run, Run]:
    """The two runs a paired test compares: those of the lowest seed both methods ran, else each one's lowest
    (then setting_diff names the seeds)."""
    common = sorted(set(a) & set(b))
    return (a[common[0]], b[common[0]]) if common else (a[min(a)], b[min(b)])


def paired_method_tests(runs: list[Run], metric: str = "accuracy",
                        pairs: Sequence[tuple[str, str]] | None = None) -> list[PairedRow]:
    """McNemar's exact test and the paired difference of each pair of methods (default:
    ``methods.treatment_pairs()``, the treatment against the reference and against each baseline), per task and
    model, on the items both runs scored (one seed each: pair_of; a test whose runs lack samples.jsonl is left
    out)."""
    if metric not in COMPARED:
        raise UserError(f"--metric {shown(metric)}: choose one of {', '.join(COMPARED)}")
    found = runs_by_seed(runs)
    tests = []
    for task, model in sorted({(t, m) for t, m, _ in found}):
        for a, b in methods.treatment_pairs() if pairs is None else pairs:
            if (task, model, a) not in found or (task, model, b) not in found:
                continue
            run_a, run_b = pair_of(found[(task, model, a)], found[(task, model, b)])
            try:
                outcome_a, outcome_b = item_outcomes(run_a, metric), item_outcomes(run_b, metric)
            except (OSError, ValueError, KeyError):
                continue
            test = paired_test(a, b, outcome_a, outcome_b)
            if test.n:
                differs = setting_diff(run_a.results.get("config") or {}, run_b.results.get("config") or {})
                tests.append(PairedRow(task, model, metric, test, tuple(differs), (run_a, run_b)))
    return tests


@dataclass
class PairedRow:
    """A paired test of two methods of one model on one task."""

    task: str
    model: str
    metric: str
    test: PairedTest
    differs: tuple[str, ...]  # what besides the method sets the two runs apart (store.identity.setting_diff)
    runs: tuple[Run, Run] = field(compare=False, repr=False)  # the two runs compared (pair_of)

    def to_json(self) -> dict[str, Any]:
        return json_safe({"task": self.task, "model": self.model, "metric": self.metric, **self.test.to_json(),
                          "settings_differ": list(self.differs)})
