"""The report's pictures, drawn with matplotlib's object API and returned as inline SVG data URIs.

pyplot is avoided on purpose: it keeps global figure state and picks a GUI backend, neither of which a
library called from a CLI (or from another program's process) should touch. Each figure is turned
into a ``Chart``, which the templates show as an `<img src="data:image/svg+xml;base64,...">`: that keeps
the HTML self-contained and keeps matplotlib's internal SVG ids from clashing between figures on one page.
"""

from __future__ import annotations

import base64
import io
import math
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib
from matplotlib.figure import Figure

from softeval.analysis.compare import Comparison
from softeval.diagnosis import CAUSES
from softeval.methods import REFERENCE, colour_of, label_of, names, specs, with_role
from softeval.store.format import Run

PART_COLORS = {"format_rate": "#8fbcd4", "knowledge_accuracy": "#e0a458", "accuracy": "#2f7ebc"}
MARKERS = "osD^vP*Xh"


class Chart(NamedTuple):
    """A figure as the report shows it (templates/tables.html.j2, ``chart``): its alt text and its SVG as a
    data URI."""

    alt: str
    src: str


def img(fig: Figure, alt: str) -> Chart:
    """The figure as an SVG data URI, with its alt text (the template escapes it)."""
    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "softeval", "svg.fonttype": "path"}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return Chart(alt, f"data:image/svg+xml;base64,{data}")


def _value(run: Run, metric: str) -> float | None:
    value = (run.metric(metric) or {}).get("value")
    return None if value is None else float(value)


def format_vs_accuracy(runs: list[Run]) -> Figure:
    """Each run as a point (format_rate, accuracy), one panel per method: strict accuracy can never
    exceed format_rate, so the distance below the diagonal is knowledge lost (or never there), and a
    method that moves points right without moving them up fixes format, not knowledge."""
    methods = [m for m in names() if any(r.method == m for r in runs)]
    tasks = sorted({r.task for r in runs})
    fig = Figure(figsize=(3.9 * len(methods), 3.9))
    axes = fig.subplots(1, len(methods), sharex=True, sharey=True, squeeze=False)[0]
    for ax, method in zip(axes, methods):
        ax.plot([0, 1], [0, 1], ls="--", lw=0.8, color="#888")
        for t, task in enumerate(tasks):
            pts = [(r, _value(r, "format_rate"), _value(r, "accuracy")) for r in runs
                   if r.method == method and r.task == task]
            pts = [(r, x, y) for r, x, y in pts if x is not None and y is not None]
            if not pts:
                continue
            ax.scatter([p[1] for p in pts], [p[2] for p in pts], s=42, color=colour_of(method),
                       marker=MARKERS[t % len(MARKERS)], edgecolor="black", linewidth=0.4, label=task,
                       zorder=3)
            if len(pts) <= 16:
                for r, x, y in pts:
                    ax.annotate(r.model, (x, y), fontsize=6.5, xytext=(-4, 3), textcoords="offset points",
                                ha="right")
        ax.set(xlim=(-0.02, 1.05), ylim=(-0.02, 1.05), title=label_of(method))
        ax.set_xlabel("format_rate", fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        if len(tasks) > 1:
            ax.legend(fontsize=6.5, loc="upper left", frameon=False)
    axes[0].set_ylabel("accuracy (strict)", fontsize=8)
    fig.tight_layout()
    return fig


def learning_curves(curves: list[tuple[Run, list[dict[str, Any]]]]) -> Figure:
    """Small multiples of tuning (the runs of methods that train something): loss (left axis) and held-out
    format_rate / accuracy (right axis) by step: the picture of format saturating while knowledge stays flat."""
    cols = min(3, len(curves))
    rows = math.ceil(len(curves) / cols)
    fig = Figure(figsize=(4.4 * cols, 3.0 * rows))
    for k, (run, curve) in enumerate(curves):
        ax = fig.add_subplot(rows, cols, k + 1)
        steps = [c["step"] for c in curve if c.get("loss") is not None]
        ax.plot(steps, [c["loss"] for c in curve if c.get("loss") is not None], color="#666", lw=1.2,
                label="loss")
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylabel("loss", fontsize=8)
        right = ax.twinx()
        for name in ("format_rate", "accuracy"):
            color = PART_COLORS[name]
            pts = [(c["step"], c[name]) for c in curve if c.get(name) is not None]
            if pts:
                right.plot(*zip(*pts), marker="o", ms=3, lw=1.4, color=color, label=name)
        right.set_ylim(0, 1.02)
        right.tick_params(labelsize=7)
        ax.tick_params(labelsize=7)
        ax.set_title(f"{run.model} · {run.task} · {run.method} · seed {run.seed}", fontsize=8.5)
        if k == 0:
            handles = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
            right.legend(handles=handles, fontsize=7, loc="center right", frameon=False)
    fig.tight_layout()
    return fig


def decomposition(runs: list[Run], task: str) -> Figure:
    """Per model and method: format_rate, knowledge_accuracy and accuracy side by side
    (accuracy = format_rate x knowledge_accuracy), letter_loglik_accuracy as a format-free tick."""
    task_runs = [r for r in runs if r.task == task]
    methods = [m for m in names() if any(r.method == m for r in task_runs)]
    parts = list(PART_COLORS)
    widths = [len({r.model for r in task_runs if r.method == m}) + 0.6 for m in methods]
    fig = Figure(figsize=(max(6.0, 0.75 * sum(widths) + 1.0), 3.6))
    axes = fig.subplots(1, len(methods), sharey=True, squeeze=False, width_ratios=widths)[0]
    for ax, method in zip(axes, methods):
        models = sorted({r.model for r in task_runs if r.method == method})
        for i, model in enumerate(models):
            mine = [r for r in task_runs if r.model == model and r.method == method]
            for j, part in enumerate(parts):
                values = [v for v in (_value(r, part) for r in mine) if v is not None]
                if values:
                    ax.bar(i + (j - 1) * 0.26, sum(values) / len(values), width=0.26,
                           color=PART_COLORS[part], label=part)
            loglik = [v for v in (_value(r, "letter_loglik_accuracy") for r in mine) if v is not None]
            if loglik:
                ax.plot([i - 0.4, i + 0.4], [sum(loglik) / len(loglik)] * 2, color="black", lw=1.2,
                        ls=":", label="letter_loglik_accuracy")
        ax.set_xticks(range(len(models)), models, rotation=30, ha="right", fontsize=7)
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{task} · {label_of(method)}", fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    legend: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    fig.legend(list(legend.values()), list(legend), loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4,
               fontsize=7.5,
               frameon=False)
    return fig


def rank_scatter(comparison: Comparison, task: str) -> Figure:
    """Base score (x) against post-trained partner's score (y) per method, tau and rho in the title."""
    rows = [r for r in comparison.results if r.task == task]
    fig = Figure(figsize=(4.0 * len(rows), 3.6))
    for k, row in enumerate(rows):
        ax = fig.add_subplot(1, len(rows), k + 1)
        for (base, post) in comparison.pairs:
            x, y = row.base_scores.get(base), row.post_scores.get(post)
            if x is None or y is None:
                continue
            ax.scatter([x], [y], color=colour_of(row.method), edgecolor="black", linewidth=0.4, s=40)
            ax.annotate(base, (x, y), fontsize=6.5, xytext=(4, 3), textcoords="offset points")
        tau = "n/a" if row.kendall_tau is None or math.isnan(row.kendall_tau) else f"{row.kendall_tau:.2f}"
        rho = "n/a" if row.spearman_rho is None or math.isnan(row.spearman_rho) else f"{row.spearman_rho:.2f}"
        ax.set_title(f"{task} · {row.method}\nKendall τ={tau}  Spearman ρ={rho}", fontsize=8.5)
        ax.set_xlabel(f"base model {comparison.metric} ({row.method})", fontsize=8)
        ax.set_ylabel(f"post-trained score (from {Path(comparison.post_file).name})" if comparison.post_file
                      else f"post-trained {comparison.metric} ({comparison.post_method})", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# The format-free references the knowledge chart draws from the REFERENCE method's run: (metric, label, colour).
REFERENCE_BARS = (("cloze_accuracy_norm", "cloze (per char)", "#6a9f58"),
                  ("letter_loglik_accuracy", "letter log-lik.", "#c9c9c9"))
CAUSE_COLORS = {"empty": "#b0b7c0", "max_new_tokens": "#e0a458", "wrong_style": "#2f7ebc",
                "refusal_or_echo": "#c4504a", "other": "#7d5ba6"}


def knowledge_bar_specs(rows: list[tuple[str, dict[tuple[str, str], dict]]]) -> list[tuple[str, str, str, str]]:
    """The knowledge chart's bars, each (metric, method, label, colour): the format-free references of the
    REFERENCE method's run, then each method's strict accuracy in table order; a method not scored by default
    (asked for by name) gets its bar only where a model of ``rows`` has its run."""
    references = [(metric, m, label, colour) for m in with_role(REFERENCE)[:1]
                  for metric, label, colour in REFERENCE_BARS]
    return [*references, *(("accuracy", s.name, s.label, s.colour) for s in specs()
                           if s.default or any(("accuracy", s.name) in v for _, v in rows))]


def knowledge_bars(rows: list[tuple[str, dict[tuple[str, str], dict]]], task: str) -> Figure:
    """Per model: the cloze reference beside the strict accuracy of each method, with 95% intervals.
    ``rows``: (model, {(metric, method): metric object}). A treatment's bar that reaches the cloze
    bar has recovered what format hid; one far above the reference's but not near cloze is worth a look
    at its permutation consistency."""
    fig = Figure(figsize=(max(5.5, 1.5 * len(rows) + 2.0), 3.4))
    ax = fig.subplots()
    shown = knowledge_bar_specs(rows)
    width = 0.8 / len(shown)
    for k, (metric, method, label, color) in enumerate(shown):
        xs, ys, lo, hi = [], [], [], []
        for i, (_model, values) in enumerate(rows):
            m = values.get((metric, method))
            if not m or m.get("value") is None:
                continue
            xs.append(i - 0.4 + (k + 0.5) * width)
            ys.append(m["value"])
            lo.append(m["value"] - (m.get("ci_low") if m.get("ci_low") is not None else m["value"]))
            hi.append((m.get("ci_high") if m.get("ci_high") is not None else m["value"]) - m["value"])
        if xs:
            ax.bar(xs, ys, width=width, color=color, label=label, yerr=[lo, hi], capsize=2,
                   error_kw={"lw": 0.7, "ecolor": "#333"})
    ax.set_xticks(range(len(rows)), [model for model, _ in rows], rotation=20, ha="right", fontsize=7.5)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("accuracy", fontsize=8)
    ax.set_title(f"{task}: cloze reference against each method's strict accuracy", fontsize=9)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, frameon=False, ncol=len(shown), loc="upper center",
              bbox_to_anchor=(0.5, -0.28))
    fig.tight_layout()
    return fig


def failure_bars(rows: list[tuple[str, dict]], task: str) -> Figure:
    """Stacked share of items per failure cause, one bar per (model, method) run: what the strict
    format lost, and why."""
    fig = Figure(figsize=(max(5.5, 0.55 * len(rows) + 2.5), 3.4))
    ax = fig.subplots()
    bottom = [0.0] * len(rows)
    for cause in CAUSES:
        shares = [(failures["causes"].get(cause, 0) / n) if n else 0.0 for _label, (failures, n) in rows]
        ax.bar(range(len(rows)), shares, bottom=bottom, color=CAUSE_COLORS[cause], label=cause, width=0.7)
        bottom = [b + v for b, v in zip(bottom, shares)]
    ax.set_xticks(range(len(rows)), [label for label, _ in rows], rotation=30, ha="right", fontsize=7)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("share of items failing the format", fontsize=8)
    ax.set_title(f"{task}: why outputs failed the strict format", fontsize=9)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig
