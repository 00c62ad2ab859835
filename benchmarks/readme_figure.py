"""The README's picture, drawn from a real run of the main job (`make readme-figure`).

Left: each method's strict accuracy and format_rate on the scored items, with their 95% intervals (the run's own
results.json). Right: the soft prompt's tuning curve (held-out format_rate and loss by step, curve.jsonl).

    python benchmarks/readme_figure.py --runs runs --model gemma-3-270m --task squad --seed 0 --out docs/main-job.png

Reads finished runs through the store's reader, so a damaged or unfinished run is refused, never drawn.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from matplotlib.figure import Figure

from softeval import methods
from softeval.analysis.compare import load_runs
from softeval.errors import UserError
from softeval.store.format import CURVE_FILE, Run, read_curve

BARS = (("accuracy", "accuracy (strict)", "#2f7ebc"), ("format_rate", "format_rate", "#8fbcd4"))


def chosen(root: Path, model: str, task: str, seed: int) -> list[Run]:
    runs, skipped = load_runs(root)
    for path, why in skipped:
        print(f"skipped {path}: {why}", file=sys.stderr)
    mine = [r for r in runs if r.model == model and r.task == task and r.seed == seed and r.series is None]
    order = methods.names()
    return sorted(mine, key=lambda r: order.index(r.method) if r.method in order else len(order))


def _bars(ax, runs: list[Run]) -> None:
    width = 0.38
    for j, (metric, label, colour) in enumerate(BARS):
        xs, values, lows, highs = [], [], [], []
        for i, run in enumerate(runs):
            m = run.metric(metric) or {}
            if m.get("value") is None:
                continue
            xs.append(i + (j - 0.5) * width)
            values.append(m["value"])
            low, high = (m.get(k) if m.get(k) is not None else m["value"] for k in ("ci_low", "ci_high"))
            lows.append(max(0.0, m["value"] - low))
            highs.append(max(0.0, high - m["value"]))
        ax.bar(xs, values, width=width, color=colour, label=label, yerr=[lows, highs], capsize=3,
               error_kw={"lw": 0.9})
    ax.set_xticks(range(len(runs)), [methods.label_of(r.method) for r in runs], fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of scored items", fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(axis="y", alpha=0.3)
    n = runs[0].results.get("n") if runs else None
    ax.set_title(f"{runs[0].model} · {runs[0].task} · n={n} · 95% intervals", fontsize=9)
    ax.legend(fontsize=7, frameon=False, loc="upper left")


def _curve(ax, run: Run) -> None:
    rows = read_curve(run.path / CURVE_FILE)
    pts = [(r["step"], r["format_rate"]) for r in rows if r.get("format_rate") is not None]
    ax.plot(*zip(*pts), marker="o", ms=4, color="#2f7ebc", label="held-out format_rate")
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("tuning step", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    losses = [(r["step"], r["held_out_loss"]) for r in rows if r.get("held_out_loss") is not None]
    if losses:
        right = ax.twinx()
        right.plot(*zip(*losses), color="#666", lw=1.2, ls="--", label="held-out loss")
        right.tick_params(labelsize=7)
        right.set_ylabel("loss", fontsize=8)
        handles = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
        ax.legend(handles=handles, fontsize=7, frameon=False, loc="center right")
    ax.set_title(f"{methods.label_of(run.method)}: tuning (seed {run.seed})", fontsize=9)


def draw(runs: list[Run]) -> Figure:
    tuned = [r for r in runs if (r.path / CURVE_FILE).is_file() and methods.spec_of(r.method).role
             == methods.TREATMENT]  # the soft prompt's curve
    fig = Figure(figsize=(9.0, 3.4) if tuned else (5.0, 3.4))
    axes = fig.subplots(1, 2 if tuned else 1, squeeze=False, width_ratios=[1.4, 1] if tuned else None)[0]
    _bars(axes[0], runs)
    if tuned:
        _curve(axes[1], tuned[0])
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=Path, default=Path("runs"))
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--task", default="squad")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("docs/main-job.png"))
    args = p.parse_args(argv)
    try:
        runs = chosen(args.runs, args.model, args.task, args.seed)
    except UserError as err:
        print(f"{err} (run `make run` first)", file=sys.stderr)
        return 2
    if not runs:
        print(f"no finished {args.model} {args.task} seed {args.seed} run under {args.runs}: run `make run` first",
              file=sys.stderr)
        return 2
    # metadata without a date or software name, so the same runs give the same bytes
    draw(runs).savefig(args.out, dpi=110, metadata={"Software": None})
    print(f"wrote {args.out} from {len(runs)} runs: {', '.join(r.method for r in runs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
