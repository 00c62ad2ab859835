"""The analysis subcommands: `runs`, `compare`, `report`. Thin: parse, call the library, print.

Kept apart from cli.py so the analysis side can be read and tested without the model-running side;
cli.py calls `register(subparsers)`; each handler is the parser's `handler` default, which cli.main
calls with the namespace and whose return value is the exit code.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from softeval.analysis.choices import post_methods, reference_method
from softeval.cli.lmeval_groups import print_group_scores
from softeval.cli.spread import print_spread
from softeval.consoles import table_console
from softeval.errors import UserError, shown
from softeval.methods import label_of
from softeval.metrics import COMPARED, kind_label
from softeval.store import index
from softeval.store.format import INDEX_FILE

if TYPE_CHECKING:  # the statistics import numpy and scipy: `softeval runs` and --help do without them
    from softeval.analysis.compare import Comparison
    from softeval.analysis.pairs import PairedRow
    from softeval.analysis.post_scores import PostScores

DEFAULT_RUNS = "runs"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `runs`, `compare` and `report` to the main parser's subcommands."""
    p = subparsers.add_parser("runs", help="list finished runs (from the index at RUNS_DIR/index.sqlite)")
    p.add_argument("runs_dir", nargs="?", default=DEFAULT_RUNS, metavar="RUNS_DIR")
    p.add_argument("--json", action="store_true", help="print the runs as JSON")
    p.add_argument("--rebuild", action="store_true", help="rebuild the index from the run folders first")
    p.set_defaults(handler=cmd_runs)

    p = subparsers.add_parser("compare", help="paired tests between methods (McNemar) and, with --pair, do "
                                             "base-model scores predict the post-trained ranking?")
    p.add_argument("runs_dir", nargs="?", default=DEFAULT_RUNS, metavar="RUNS_DIR")
    _ranking_args(p, required=False)
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")
    p.set_defaults(handler=cmd_compare)

    p = subparsers.add_parser("report", help="write one self-contained HTML report with plots")
    p.add_argument("runs_dir", nargs="?", default=DEFAULT_RUNS, metavar="RUNS_DIR")
    p.add_argument("-o", "--output", default="report.html", help="HTML file to write (default: report.html)")
    _ranking_args(p, required=False)
    p.set_defaults(handler=cmd_report)


def _ranking_args(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument(
        "--pair",
        action="append",
        default=[],
        required=required,
        metavar="BASE=POST",
        help="a base model and its post-trained version (repeat; at least 3 pairs)",
    )
    p.add_argument("--metric", default="accuracy", choices=list(COMPARED),
                   help="score to rank by (and to test methods on)")
    p.add_argument(
        "--post-method",
        default=reference_method(),
        choices=list(post_methods()),
        help=f"how the post-trained models are scored (default {reference_method()}: how they are used; "
        "'best' takes each one's highest-scoring method)",
    )
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap replicates (default 2000)")
    p.add_argument("--post-scores", metavar="FILE", default=None,
                   help="the post-trained side from a CSV or JSON file (columns model, task, score in [0,1], "
                   "optionally n: a leaderboard's or model card's numbers) instead of runs; POST of each --pair "
                   "names a model of the file")


def _runs_dir(args: argparse.Namespace) -> Path:
    path = Path(args.runs_dir)
    if not path.is_dir():
        raise UserError(
            f"runs folder {shown(str(path))} does not exist (run `softeval run` first, or pass RUNS_DIR)"
        )
    return path


def cmd_runs(args: argparse.Namespace) -> int:
    out = _runs_dir(args)
    console = table_console(stderr=args.json)  # with --json, stdout carries only the JSON
    left_out: list[Path] = []

    def skipped(path: Path, why: str) -> None:
        left_out.append(path)
        console.print(f"skipped {path}: {why}", style="yellow", markup=False, highlight=False)

    if args.rebuild:
        report = index.rebuild(out)
        if report.damaged_aside:
            console.print(f"kept the damaged index as {report.damaged_aside}", style="yellow", markup=False)
        console.print(f"Rebuilt {out / INDEX_FILE}: {len(report.runs)} runs indexed.", markup=False)
    runs = index.list_runs(out, on_skip=skipped)  # names every folder it skips, on every listing
    if args.json:
        print(json.dumps(runs, indent=2))
        return 0
    table = Table(
        title=f"{len(runs)} finished runs in {out}",
        caption="folder: <model>/<task>/<method>/seed<N>; --json for paths and intervals",
    )
    numeric = ("seed", "n", "acc", "format", "knowl.")
    for col in ("model", "kind", "task", "method", *numeric, "top answer"):
        table.add_column(col, overflow="fold", justify="right" if col in numeric else "left")
    for r in runs:
        cells = (
            r["model"],
            kind_label(r["model_kind"], r.get("model_kind_source")),
            r["task"],
            r["method"],
            str(r["seed"]),
            str(r["n"]),
            _num(r["accuracy"]),
            _num(r["format_rate"]),
            _num(r["knowledge_accuracy"]),
            r["top_answer"] or "-",
        )
        table.add_row(*(Text(cell) for cell in cells))  # Text: names are never read as rich markup
    console.print(table)
    if left_out:
        console.print(f"{len(left_out)} skipped (not finished, valid runs), named above", style="yellow",
                      markup=False, highlight=False)
    return 0


def _post_scores(args: argparse.Namespace, pairs: list[tuple[str, str]]) -> PostScores | None:
    """The --post-scores file, read and checked before any run is; None without one."""
    from softeval.analysis.compare_record import post_side

    return post_side(args.post_scores, pairs)


def cmd_compare(args: argparse.Namespace) -> int:
    # the record is built once, in the analysis layer (softeval.results.compare returns the same one as data)
    from softeval.analysis.compare import parse_pairs
    from softeval.analysis.compare_record import compare_record, nothing_to_compare

    out = _runs_dir(args)
    record = compare_record(out, parse_pairs(args.pair), args.metric, args.post_method, args.n_boot,
                            args.post_scores)
    if args.json:
        print(json.dumps(record.to_json(), indent=2))
        return 0
    console = table_console()
    for path, why in record.skipped:
        console.print(f"skipped {path}: {why}", style="yellow", markup=False, highlight=False)
    _print_paired(console, record.paired)
    print_spread(console, record.spreads, record.spread_tests)
    print_group_scores(console, record.groups)
    if record.comparison:
        _print_comparison(console, record.comparison)
    elif record.empty:
        raise nothing_to_compare()
    return 0


def _print_paired(console: Console, rows: list[PairedRow]) -> None:
    if not rows:
        return
    table = Table(title=f"{label_of(rows[0].test.b)} against prompting on the same items ({rows[0].metric}): "
                        "difference with 95% Tango score interval, McNemar exact p")
    for col in ("task · model", "against", "n", "accuracy", "difference", "only / only", "p"):
        table.add_column(col, overflow="fold", justify="left" if col in ("task · model", "against") else "right")
    for row in rows:
        t = row.test
        table.add_row(*(Text(cell) for cell in (
            f"{row.task} · {row.model}", t.a, str(t.n), f"{_num(t.accuracy_a)} → {_num(t.accuracy_b)}",
            f"{t.difference:+.3f} {_ci(t.ci_low, t.ci_high)}", f"{t.a_only} / {t.b_only}", _p(t.p_value))))
    console.print(table)
    for row in rows:
        if row.differs:
            console.print(f"note: {row.task} · {row.model}, {row.test.b} vs {row.test.a}: the runs differ in more than "
                          f"their method ({'; '.join(row.differs)}); the difference is not the method's alone",
                          style="yellow", markup=False, highlight=False)


def _p(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.2g}" if value < 0.01 else f"{value:.3f}"


def cmd_report(args: argparse.Namespace) -> int:
    # lazy: the report imports matplotlib, slow to import; only this command needs it
    from softeval.analysis.compare import parse_pairs
    from softeval.analysis.report import build_report

    out = _runs_dir(args)
    pairs = parse_pairs(args.pair) if args.pair else None
    post_scores = _post_scores(args, pairs or [])
    console = table_console()  # a skipped line is one line in a log
    left_out: list[Path] = []

    def skipped(where: Path, why: str) -> None:
        left_out.append(where)
        console.print(f"skipped {where}: {why}", style="yellow", markup=False, highlight=False)

    path = build_report(out, Path(args.output), pairs, args.metric, args.post_method, args.n_boot, post_scores,
                        on_skip=skipped)
    said = f"; {len(left_out)} skipped, named above and in its skipped section" if left_out else ""
    console.print(f"Wrote {path} ({path.stat().st_size / 1024:.0f} KiB{said})", markup=False, highlight=False)
    return 0


def _print_comparison(console: Console, c: Comparison) -> None:
    n_pairs = len(c.pairs)
    table = Table(
        title=f"{n_pairs} pairs: base {c.metric} against post-trained {c.post_side}, "
        f"95% bootstrap intervals over items"
    )
    for col in ("task", "base method", "Kendall tau [95% CI]", "Spearman rho [95% CI]", "items"):
        table.add_column(col, no_wrap=True, justify="left" if col in ("task", "base method") else "right")
    for r in [*c.results, *c.average]:
        cells = (
            r.task,
            r.method,
            f"{_num(r.kendall_tau)} {_ci(r.ci_low, r.ci_high)}",
            f"{_num(r.spearman_rho)} {_ci(r.spearman_ci_low, r.spearman_ci_high)}",
            str(r.n_items),
        )
        table.add_row(*(Text(cell) for cell in cells))
    console.print(table)
    for note in [*c.notes, *c.skipped]:
        console.print(f"note: {note}", style="yellow", markup=False, highlight=False)
    if c.best_method:
        b = c.best_method
        leads = ", ".join(
            f"{x['method']} by {x['tau_difference']:+.2f} {_ci(x['ci_low'], x['ci_high'])}"
            for x in b["ahead_of"]
        )
        verdict = (
            "clearly" if b["clearly_best"] else "but not clearly (a paired interval of its lead includes 0)"
        )
        console.print(
            f"Best predictor: {b['method']} (mean tau {b['kendall_tau']:.2f}), {verdict}"
            + (f"; ahead of {leads}" if leads else ""),
            markup=False,
            highlight=False,
        )


def _num(value: Any) -> str:
    return "–" if value is None or value != value else f"{value:.3f}"


def _ci(low: float | None, high: float | None) -> str:
    return "–" if low is None or high is None else f"[{low:.2f}, {high:.2f}]"
