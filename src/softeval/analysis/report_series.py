"""The report's series section: per series and task, each method's score against the training step, and
format_rate against the step. The picture it is for: zero- and few-shot curves of early checkpoints move
with whatever format a checkpoint happens to prefer, while the soft-prompted curve follows knowledge.
"""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from softeval.analysis.plots import img
from softeval.methods import colour_of, label_of, names, treatment
from softeval.metrics import METRIC
from softeval.store.format import Run

# (metric, line style): the strict score, and the format-free references where a run has them; each named by its
# short label (softeval.metrics.METRIC_TABLE).
SCORES = (("accuracy", "-"), ("lenient_accuracy", ":"), ("cloze_accuracy", "--"))


def series_runs(runs: list[Run]) -> dict[tuple[str, str], dict[tuple[str, int], Run]]:
    """(series, task) -> (method, step) -> run; of several seeds, the lowest."""
    grouped: dict[tuple[str, str], dict[tuple[str, int], Run]] = {}
    for run in sorted(runs, key=lambda r: r.seed, reverse=True):
        if run.series is not None and isinstance(run.step, int):
            grouped.setdefault((run.series, run.task), {})[(run.method, run.step)] = run
    return grouped


def _band(ax, runs: list[tuple[int, Run]], metric: str, color: str, style: str, label: str) -> None:
    pts = [(step, run.metric(metric)) for step, run in runs
           if (run.metric(metric) or {}).get("value") is not None]
    if not pts:
        return
    steps = [s for s, _ in pts]
    ax.plot(steps, [m["value"] for _, m in pts], style, color=color, marker="o", ms=3.5, lw=1.5, label=label)
    if style == "-" and all(m.get("ci_low") is not None for _, m in pts):
        ax.fill_between(steps, [m["ci_low"] for _, m in pts], [m["ci_high"] for _, m in pts], color=color,
                        alpha=0.15)


def series_figure(cells: dict[tuple[str, int], Run], title: str) -> Figure:
    """Left: accuracy (95% band), lenient and cloze against step, per method; right: format_rate."""
    fig = Figure(figsize=(10.5, 3.6))
    score, fmt = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for method in names():
        runs = sorted((step, run) for (m, step), run in cells.items() if m == method)
        if not runs:
            continue
        color = colour_of(method, "#444")
        for metric, style in SCORES:
            _band(score, runs, metric, color, style, f"{label_of(method)} {METRIC[metric].short}")
        _band(fmt, runs, "format_rate", color, "-", label_of(method))
    for ax, name in ((score, "score"), (fmt, "format_rate")):
        ax.set_xlabel("training step", fontsize=8.5)
        ax.set_ylabel(name, fontsize=8.5)
        ax.set_ylim(-0.02, 1.02)
        ax.tick_params(labelsize=7.5)
        ax.grid(alpha=0.3)
    score.legend(fontsize=6.5, frameon=False, loc="upper left")
    fmt.legend(fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=9.5)
    fig.tight_layout()
    return fig


def _tuning(run: Run | None) -> str | None:
    """The treatment's tuning of a checkpoint's run (the soft prompt's), in words: steps, seconds, where it started."""
    tuning = (run.results.get("tuning") or {}) if run else {}
    if not tuning.get("steps_run"):
        return None
    warm = tuning.get("init_from") or {}
    start = f"from step {warm['step']}" if warm.get("step") is not None else ("saved" if warm else "fresh")
    return f"{tuning['steps_run']} steps, {tuning.get('seconds', 0):.0f}s ({start})"


def series_section(runs: list[Run]) -> list[dict[str, Any]]:
    """Per series and task, what templates/series.html.j2 shows: its figure, and a table of each method's
    accuracy and format_rate and the treatment's tuning (the soft prompt's) per step."""
    treated = treatment() or ""
    blocks = []
    for (series, task), cells in sorted(series_runs(runs).items()):
        methods = [m for m in names() if any(k[0] == m for k in cells)]
        rows = []
        for step in sorted({step for _, step in cells}):
            at_step = [cells.get((m, step)) for m in methods]
            rows.append({"step": step, "tuning": _tuning(cells.get((treated, step))),
                         "metrics": [run.metric(metric) if run else None
                                     for run in at_step for metric in ("accuracy", "format_rate")]})
        blocks.append({
            "series": series, "task": task, "rows": rows,
            "chart": img(series_figure(cells, f"{series} · {task}"),
                         f"{series} {task} score and format by step"),
            "columns": ["step", *(f"{label_of(m)} {what}" for m in methods for what in ("accuracy", "format")),
                        f"{label_of(treated)} tuning".lstrip()]})
    return blocks
