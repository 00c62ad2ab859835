"""The report's series section: per series and task, each method's score against the training step, and
format_rate against the step. The picture it is for: zero- and few-shot curves of early checkpoints move
with whatever format a checkpoint happens to prefer, while the soft-prompted curve follows knowledge.
"""

from __future__ import annotations

from html import escape

from matplotlib.figure import Figure

from softeval.analysis.plots import METHOD_COLORS, img
from softeval.analysis.report_tables import metric_cell, table
from softeval.protocol import METHODS
from softeval.store.format import Run

# (metric, label, line style): the strict score, and the format-free references where a run has them.
SCORES = (("accuracy", "accuracy", "-"), ("lenient_accuracy", "lenient", ":"), ("cloze_accuracy", "cloze", "--"))


def series_runs(runs: list[Run]) -> dict[tuple[str, str], dict[tuple[str, int], Run]]:
    """(series, task) -> (method, step) -> run; of several seeds, the lowest."""
    grouped: dict[tuple[str, str], dict[tuple[str, int], Run]] = {}
    for run in sorted(runs, key=lambda r: r.seed, reverse=True):
        if run.series is not None and isinstance(run.step, int):
            grouped.setdefault((run.series, run.task), {})[(run.method, run.step)] = run
    return grouped


def _band(ax, runs: list[tuple[int, Run]], metric: str, color: str, style: str, label: str) -> None:
    pts = [(step, run.metric(metric)) for step, run in runs if (run.metric(metric) or {}).get("value") is not None]
    if not pts:
        return
    steps = [s for s, _ in pts]
    ax.plot(steps, [m["value"] for _, m in pts], style, color=color, marker="o", ms=3.5, lw=1.5, label=label)
    if style == "-" and all(m.get("ci_low") is not None for _, m in pts):
        ax.fill_between(steps, [m["ci_low"] for _, m in pts], [m["ci_high"] for _, m in pts], color=color, alpha=0.15)


def series_figure(cells: dict[tuple[str, int], Run], title: str) -> Figure:
    """Left: accuracy (95% band), lenient and cloze against step, per method; right: format_rate."""
    fig = Figure(figsize=(10.5, 3.6))
    score, fmt = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for method in METHODS:
        runs = sorted((step, run) for (m, step), run in cells.items() if m == method)
        if not runs:
            continue
        color = METHOD_COLORS.get(method, "#444")
        for metric, label, style in SCORES:
            _band(score, runs, metric, color, style, f"{method} {label}")
        _band(fmt, runs, "format_rate", color, "-", method)
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


def _tuning(run: Run | None) -> str:
    tuning = (run.results.get("tuning") or {}) if run else {}
    if not tuning.get("steps_run"):
        return '<td class="num">–</td>'
    warm = tuning.get("init_from") or {}
    start = f"from step {warm['step']}" if warm.get("step") is not None else ("saved" if warm else "fresh")
    return f'<td class="num">{tuning["steps_run"]} steps, {tuning.get("seconds", 0):.0f}s ({escape(start)})</td>'


def series_section(runs: list[Run]) -> str:
    grouped = series_runs(runs)
    if not grouped:
        return ""
    parts = ["<h2>Training runs (series)</h2>",
             '<p class="muted">Each checkpoint of a series scored as a model; accuracy with its 95% interval '
             "(band), lenient and cloze (format-free references) dashed, format_rate on the right. Zero- and "
             "few-shot curves follow whatever format a checkpoint prefers; the soft-prompted curve follows "
             "what it knows.</p>"]
    for (series, task), cells in sorted(grouped.items()):
        methods = [m for m in METHODS if any(k[0] == m for k in cells)]
        steps = sorted({step for _, step in cells})
        parts.append(f"<h3>{escape(series)} · {escape(task)}</h3>")
        parts.append(img(series_figure(cells, f"{series} · {task}"), f"{series} {task} score and format by step"))
        columns = ["step", *(f"{m} {what}" for m in methods for what in ("accuracy", "format")), "soft-prompt tuning"]
        rows = []
        for step in steps:
            at_step = [cells.get((m, step)) for m in methods]
            cells_html = "".join(metric_cell(run.metric(metric) if run else None)
                                 for run in at_step for metric in ("accuracy", "format_rate"))
            rows.append(f'<tr><td class="num">{step}</td>{cells_html}{_tuning(cells.get(("soft-prompt", step)))}</tr>')
        parts.append(table(columns, rows))
    return "".join(parts)
