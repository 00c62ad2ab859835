"""The report's testbed section, when the output root holds a `testbed.json` (`softeval testbed`): per method
Kendall tau of the base models' scores against their post-trained partners and against the ground truth,
with intervals; per recipe its ground truth and every score; the controls; and one picture of both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from softeval.analysis.plots import img
from softeval.methods import colour_of
from softeval.store.format import TESTBED_FILE

TARGETS = (("post", "vs post-trained"), ("seen", "vs facts trained on"), ("cloze", "vs cloze"))


def testbed_section(out_root: Path) -> dict[str, Any] | None:
    """The section's content, None when the root holds no testbed.json; an unreadable one is a note."""
    path = Path(out_root) / TESTBED_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        rows = [{"method": m, "cells": [cells[t] for t, _ in TARGETS]} for m, cells in data["methods"].items()]
        recipes = data["recipes"]
        score_names = list(next(iter(recipes.values()))["scores"]) if recipes else []
        return {"seeds": data["world_seeds"], "targets": [label for _, label in TARGETS], "rows": rows,
                "score_names": score_names, "recipes": recipes, "controls": data["controls"],
                "n_boot": data["n_boot"], "variants": data.get("prompt_variants"),
                "chart": img(testbed_figure(data), "testbed: Kendall tau per method "
                                                       "and each recipe's scores against its ground truth")}
    except (OSError, ValueError, KeyError, TypeError, StopIteration) as exc:
        return {"error": f"{TESTBED_FILE} cannot be read ({type(exc).__name__}: {exc})"}


def testbed_figure(data: dict[str, Any]) -> Figure:
    """Left: tau per method and target with its interval over items; right: each method's score of every
    recipe against the share of scored facts it was trained on."""
    fig = Figure(figsize=(10.5, 3.8))
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    methods = list(data["methods"])
    width = 0.8 / max(1, len(methods))
    for k, method in enumerate(methods):
        xs, ys, errs = [], [], [[], []]
        for i, (target, _) in enumerate(TARGETS):
            cell = data["methods"][method][target]
            if cell["kendall_tau"] is None:
                continue
            ci = cell["tau_ci_items"] or [cell["kendall_tau"]] * 2
            xs.append(i + (k - (len(methods) - 1) / 2) * width)
            ys.append(cell["kendall_tau"])
            errs[0].append(max(0.0, cell["kendall_tau"] - ci[0]))
            errs[1].append(max(0.0, ci[1] - cell["kendall_tau"]))
        left.bar(xs, ys, width, yerr=errs, capsize=2, label=method, color=colour_of(method, "#444"))
    left.axhline(0, color="#888", lw=0.8)
    left.set_xticks(range(len(TARGETS)), [label for _, label in TARGETS], fontsize=8)
    left.set_ylim(-1.05, 1.05)
    left.set_ylabel("Kendall τ (base models' scores)", fontsize=8)
    left.legend(fontsize=7)
    for method in [*methods, *(n for n in next(iter(data["recipes"].values()))["scores"] if n not in methods)]:
        pts = [(r["truth"]["seen_share"], r["scores"].get(method)) for r in data["recipes"].values()]
        pts = [(x, y) for x, y in pts if x is not None and y is not None]
        right.plot([x for x, _ in pts], [y for _, y in pts], "o", label=method, alpha=0.8,
                   color=colour_of(method, "#444" if method in methods else "#c4504a"))
    right.set_xlabel("share of scored facts trained on (ground truth)", fontsize=8)
    right.set_ylabel("accuracy", fontsize=8)
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
