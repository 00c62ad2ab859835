"""The report's spread section, when a root holds runs of two or more prompt variants (tasks/variants.py): per
(model, task, method, seed) accuracy and format_rate across variants (analysis/spread.py), what the spread tests
show, and a chart per (model, task) of accuracy under each variant, one line per method."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from matplotlib.figure import Figure

from softeval.analysis.plots import img
from softeval.analysis.spread import Spread, spread_tests, spreads
from softeval.methods import colour_of, label_of
from softeval.store.format import Run


def spread_section(runs: list[Run]) -> dict[str, Any] | None:
    """The section's content; None when no run has another variant beside it."""
    found = spreads(runs)
    if not found:
        return None
    by_pair: dict[tuple[str, str], list[Spread]] = defaultdict(list)
    for s in found:
        by_pair[(s.model, s.task)].append(s)
    charts = [img(spread_figure(model, task, rows), f"accuracy under each prompt variant on {task}, {model}")
              for (model, task), rows in by_pair.items()]
    return {"rows": found, "tests": spread_tests(runs), "charts": charts}


def spread_figure(model: str, task: str, rows: list[Spread]) -> Figure:
    """Accuracy per prompt variant, one line of points per method (and seed)."""
    fig = Figure(figsize=(6.4, 3.2))
    ax = fig.add_subplot(1, 1, 1)
    for s in rows:
        label = label_of(s.method) + (f" (seed {s.seed})" if len({r.seed for r in rows}) > 1 else "")
        ax.plot(s.variants, s.accuracy.values, marker="o", lw=1, label=label, color=colour_of(s.method))
    ax.set_xticks(sorted({v for s in rows for v in s.variants}))
    ax.set_xlabel("prompt variant (0: the task's own prompt)", fontsize=8)
    ax.set_ylabel("accuracy", fontsize=8)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{task}, {model}", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    ax.tick_params(labelsize=8)
    fig.tight_layout()
    return fig
