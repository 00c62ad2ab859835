"""One self-contained HTML report over a runs folder: tables, pictures, and the items worth reading.

Self-contained because reports get mailed, attached to issues and opened offline: no scripts, fonts or
images are fetched, plots are inline SVG. This module gathers what the page shows; the page itself is the
jinja2 templates under ``templates/`` (``report.html.j2`` and the sections it includes), rendered with
autoescaping on, since model outputs are arbitrary text. Each run's samples.jsonl is read once, by the
scan that checks it (``load_runs(keep_samples=True)``); every section takes them from the run.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from softeval.analysis import plots
from softeval.analysis.compare import Comparison, compare_runs, load_runs, samples_of
from softeval.analysis.lmeval_groups import GroupScore, group_scores
from softeval.analysis.pairs import paired_method_tests
from softeval.analysis.post_scores import PostScores
from softeval.analysis.report_series import series_section
from softeval.analysis.report_spread import spread_section
from softeval.analysis.report_tables import render as render_template
from softeval.analysis.report_testbed import testbed_section
from softeval.analysis.verdict import verdicts
from softeval.diagnosis import CAUSES, count_causes
from softeval.errors import UserError
from softeval.methods import compared, label_of, names, pairs, reference, specs, treatment, tuned_names
from softeval.metrics import METRICS, kind_label, top_answer
from softeval.store.format import CURVE_FILE, REPORT_FILE, Run, read_curve
from softeval.store.lmeval_groups import read_groups

MAX_DISAGREEMENTS = 40  # per run in the sample browser; keeps a big report openable
MAX_CURVES = 24
FAILURE_EXAMPLES = 2  # per cause and run in the failure browser

def _short(label: str) -> str:
    """A label's first word, where a column header names the treatment short ("soft" of "soft-prompt")."""
    return label.split("-")[0]


def knowledge_columns(methods: tuple[str, ...]) -> tuple[str, ...]:
    """The knowledge table's header with a column of strict accuracy per method in ``methods``."""
    first = ("model", "cloze", "cloze per char", "letter log-lik.", *(label_of(m) for m in methods))
    treated = treatment()
    if treated is None:
        return first
    label = label_of(treated)
    return (*first, f"{label} permutation consistency", f"{label} circular acc.",
            *(f"{_short(label)} − {label_of(m)}" for m in compared()))


def table_methods(runs: list[Run]) -> tuple[str, ...]:
    """The methods the knowledge table has a column for: the default ones, and any other where a run has it."""
    return tuple(s.name for s in specs() if s.default or any(r.method == s.name for r in runs))


def _listed(words: list[str], conjunction: str) -> str:
    """``words`` as prose: "a", "a and b", "a, b and c"."""
    return f"{', '.join(words[:-1])} {conjunction} {words[-1]}" if len(words) > 1 else "".join(words)


def build_report(
    out_root: Path,
    output: Path,
    pairs: list[tuple[str, str]] | None = None,
    metric: str = "accuracy",
    post_method: str | None = None,
    n_boot: int = 1000,
    post_scores: PostScores | None = None,
    on_skip: Callable[[Path, str], None] | None = None,
) -> Path:
    """Scan the runs folder, compute the ranking analysis if pairs are given (its post-trained side from
    ``post_scores``, a file, where given), write the HTML file. Each folder left out is named in the page's
    skipped section and told to ``on_skip(path, why)``."""
    output = Path(output)
    _check_output(output)  # before the analysis, which can take a while
    runs, skipped = load_runs(Path(out_root), keep_samples=True)
    for path, why in skipped:
        if on_skip:
            on_skip(path, why)
    comparison = compare_runs(runs, pairs, metric, post_method, n_boot, post_scores=post_scores) if pairs else None
    groups = group_scores([r.results for r in runs], read_groups(Path(out_root)))
    page = render(runs, skipped_rows(Path(out_root), skipped), comparison, title=f"softeval report: {Path(out_root)}",
                  groups=groups, testbed=testbed_section(Path(out_root)))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(page, encoding="utf-8")
    return output


def skipped_rows(out_root: Path, skipped: list[tuple[Path, str]]) -> list[dict[str, str]]:
    """The skipped section's rows (templates/skipped.html.j2): each folder, below the output root where it
    is, and why it was left out."""
    rows = []
    for path, why in skipped:
        try:
            folder = Path(path).relative_to(out_root).as_posix()
        except ValueError:
            folder = str(path)
        rows.append({"folder": folder, "reason": why})
    return rows


def render(
    runs: list[Run], skipped: list[dict[str, str]], comparison: Comparison | None, title: str,
    groups: list[GroupScore] | None = None, testbed: dict[str, Any] | None = None,
) -> str:
    """The whole page as a string; ``skipped``: the folders left out (``skipped_rows``); ``groups``: lm-eval
    groups' scores (analysis/lmeval_groups.py)."""
    rank = {m: i for i, m in enumerate(names())}
    runs = sorted(runs, key=lambda r: (r.task, r.model, rank.get(r.method, len(rank)), r.method, r.seed))
    tuned = [label_of(m) for m in tuned_names()]
    page: dict[str, Any] = {
        "title": title, "runs": runs, "skipped": skipped, "n_models": len({r.model for r in runs}), "groups": groups,
        "n_tasks": len({r.task for r in runs}), "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "curve_file": CURVE_FILE, "ranking": comparison, "testbed": testbed, "spread": None,
        "reference": label_of(reference() or ""), "tuned_and": _listed(tuned, "and"),
        "tuned_or": _listed(tuned, "or")}
    if runs:
        samples = {run.path: _samples(run) for run in runs}
        # f1 only where a run has it (a task that scores token F1): a column of dashes would widen every
        # report of multiple-choice runs past a 1280-px window
        metrics = [m for m in METRICS if m != "f1" or any(r.metric(m) for r in runs)]
        tasks = sorted({r.task for r in runs})
        page.update(
            metric_columns=("task", "model", "kind", "method", "seed", "n", *metrics, "top answer"),
            metric_rows=[_metric_row(r, metrics) for r in runs],
            format_chart=plots.img(plots.format_vs_accuracy(runs), "format_rate against accuracy per method"),
            decomposition_charts=[plots.img(plots.decomposition(runs, task), f"knowledge versus format on "
                                            f"{task}") for task in tasks],
            knowledge_columns=knowledge_columns(table_methods(runs)), knowledge=knowledge_blocks(runs, samples),
            curves=_curves(runs), series=series_section(runs),
            ranking_charts=[plots.img(plots.rank_scatter(comparison, task), f"rank scatter on {task}")
                            for task in sorted({r.task for r in comparison.results})] if comparison else [],
            disagreements=_disagreements(runs, samples), spread=spread_section(runs))
    return render_template("report.html.j2", **page)


def _samples(run: Run) -> list[dict[str, Any]] | None:
    """The run's samples (kept by its scan), or None where they cannot be read."""
    try:
        return samples_of(run)
    except (OSError, ValueError):
        return None


def _metric_row(r: Run, metrics: list[str]) -> dict[str, Any]:
    kind = kind_label(r.model_kind, r.results.get("model_kind_source"))
    return {"task": r.task, "model": r.model, "kind": kind, "method": r.method, "seed": r.seed,
            "n": str(r.results.get("n", "")), "metrics": [r.metric(m) for m in metrics],
            "top": (top_answer(r.results, sep="\n") or "–").split("\n")}  # the answer above its share


def knowledge_blocks(runs: list[Run], samples: dict[Path, list[dict] | None]) -> list[dict[str, Any]]:
    """Per task (templates/knowledge.html.j2): the verdicts; per model the format-free references (cloze,
    letter log-likelihood) beside each method's strict accuracy, the soft prompt's label-prior check and
    the paired tests; the cloze figure; and why outputs failed the format."""
    tests = paired_method_tests(runs, pairs=pairs())  # the table's pairs and the verdicts' at once
    ref, treated = reference(), treatment()
    against = compared() if treated else ()
    paired = {(r.task, r.model, r.test.a): r for r in tests if r.test.b == treated}
    said = verdicts(runs, tests)
    blocks = []
    for task in sorted({r.task for r in runs}):
        task_runs = [r for r in runs if r.task == task]
        first: dict[tuple[str, str], Run] = {}
        for run in sorted(task_runs, key=lambda r: r.seed):
            first.setdefault((run.model_key, run.method), run)
        rows, bars = [], []
        for model in sorted({r.model_key for r in task_runs}):
            values = {(metric, method): run.metric(metric) for (m, method), run in first.items() if m == model
                      for metric in METRICS if run.metric(metric)}
            bars.append((model, values))
            cloze_from = next((meth for meth in names() if (("cloze_accuracy", meth) in values)), None)
            own = () if treated is None else (values.get(("permutation_consistency", treated)),
                                                values.get(("circular_accuracy", treated)))
            rows.append({
                "model": model, "cloze_from": None if cloze_from in (None, ref) else cloze_from,
                "metrics": [values.get(("cloze_accuracy", cloze_from)),
                            values.get(("cloze_accuracy_norm", cloze_from)),
                            values.get(("letter_loglik_accuracy", cloze_from or ref)),
                            *(values.get(("accuracy", meth)) for meth in table_methods(runs)), *own],
                "paired": [paired.get((task, model, meth)) for meth in against]})
        if not any((metric, meth) in v for _, v in bars for meth in names()
                   for metric in ("cloze_accuracy", "accuracy")):
            continue
        blocks.append({
            "task": task, "verdicts": [v for v in said if v.task == task], "rows": rows,
            "chart": plots.img(plots.knowledge_bars(bars, task),
                               f"cloze reference and strict accuracy on {task}"),
            "failures": _failures(task_runs, task, samples)})
    return blocks


def _failures(task_runs: list[Run], task: str,
              samples: dict[Path, list[dict] | None]) -> dict[str, Any] | None:
    """The format-failure causes of the task's runs (a figure) with example outputs per cause."""
    bars, details = [], []
    for run in task_runs:
        rows = samples[run.path] or []
        failures = run.results.get("format_failures")
        if failures is None and rows and any("failure" in s for s in rows):
            failures = count_causes(rows)
        if not failures:
            continue
        n = int(run.results.get("n") or len(rows) or 0)
        label = f"{run.model} · {run.method}" + (f" · s{run.seed}" if run.seed else "")
        bars.append((label, (failures, n)))
        examples = [{"cause": cause, "sample": s} for cause in CAUSES
                    for s in [s for s in rows if s.get("failure") == cause][:FAILURE_EXAMPLES]]
        if examples:
            causes = failures["causes"]
            counts = ", ".join(f"{c} {causes.get(c, 0)}" for c in CAUSES if causes.get(c))
            details.append({"label": label, "failed": failures.get("failed", 0), "n": n, "counts": counts,
                            "hit": failures.get("hit_max_new_tokens", 0), "examples": examples})
    if not bars:
        return None
    return {"chart": plots.img(plots.failure_bars(bars, task), f"format failure causes on {task}"),
            "details": details}


def _check_output(output: Path) -> None:
    """The report's file: not a folder, and not below a file (its missing folders are created)."""
    if output.is_dir():
        raise UserError(f"-o {output} is a folder: give the report's file name, "
                        f"e.g. -o {output / REPORT_FILE}")
    parent = next(p for p in output.absolute().parents if p.exists())
    if not parent.is_dir():
        raise UserError(f"-o {output}: {parent} is a file, not a folder")


def _curves(runs: list[Run]) -> dict[str, Any]:
    """The tuned runs' learning curves (the methods that train something: MethodSpec.tunes; the first MAX_CURVES
    drawn), and the damaged ones named."""
    curves, damaged = [], []
    tuned = tuned_names()
    for run in runs:
        path = run.path / CURVE_FILE
        if run.method in tuned and path.is_file():
            try:
                rows = read_curve(path)
            except ValueError as err:
                damaged.append(f"{run.rel}/{CURVE_FILE} is damaged ({str(err).splitlines()[0]}): not drawn")
                continue
            if rows:
                curves.append((run, rows))
    chart = None
    if curves:
        chart = plots.img(plots.learning_curves(curves[:MAX_CURVES]), "learning curves of the tuned methods")
    return {"chart": chart, "damaged": damaged, "found": len(curves), "shown": MAX_CURVES,
            "more": len(curves) > MAX_CURVES}


def _disagreements(runs: list[Run], samples: dict[Path, list[dict] | None]) -> list[dict[str, Any]]:
    """Per run, the items strict and lenient scoring mark differently (the first MAX_DISAGREEMENTS)."""
    blocks = []
    for run in runs:
        rows = samples[run.path]
        differ = [s for s in rows or [] if bool(s.get("correct")) != bool(s.get("lenient_correct"))]
        if differ:
            blocks.append({"run": run, "rows": differ[:MAX_DISAGREEMENTS], "found": len(differ),
                           "n": len(rows)})
    return blocks
