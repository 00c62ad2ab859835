"""One self-contained HTML report over a runs folder: tables, pictures, and the items worth reading.

Self-contained because reports get mailed, attached to issues and opened offline: no scripts, fonts or
images are fetched, plots are inline SVG. Every piece of text that came from a run (model names,
prompts, model outputs) is escaped, since model outputs are arbitrary text.
"""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape
from pathlib import Path

from softeval.analysis import plots
from softeval.analysis.compare import (
    Comparison,
    Correlation,
    PairedRow,
    compare_runs,
    load_runs,
    paired_method_tests,
)
from softeval.analysis.report_series import series_section
from softeval.analysis.report_tables import TABLE_CSS, metric_cell, table
from softeval.analysis.verdict import PAIRS as VERDICT_PAIRS
from softeval.analysis.verdict import Verdict, verdicts
from softeval.diagnosis import CAUSES, count_causes
from softeval.errors import UserError
from softeval.metrics import kind_label, top_answer
from softeval.protocol import METHODS, METRICS
from softeval.store.format import CURVE_FILE, REPORT_FILE, SAMPLES_FILE, Run, read_curve, read_samples

MAX_DISAGREEMENTS = 40  # per run in the sample browser; keeps a big report openable
MAX_CURVES = 24
FAILURE_EXAMPLES = 2  # per cause and run in the failure browser

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2430;
background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:24px;margin:0 0 4px}
h2{font-size:18px;margin:34px 0 8px;border-bottom:1px solid #d8dde3;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}.muted{color:#5d6875}
.verdict{background:#eef6ee;border-left:3px solid #5a9e5a;padding:4px 10px;margin:6px 0}.verdict p{margin:4px 0}
.note{background:#fff8e1;border-left:3px solid #e0a458;padding:6px 10px;margin:6px 0}
.ci{color:#7a8591;font-size:11px}
img.chart{max-width:100%;background:#fff;border:1px solid #dde2e8;margin:6px 0}
details{background:#fff;border:1px solid #dde2e8;margin:6px 0;padding:4px 10px}
summary{cursor:pointer;font-weight:600}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font-size:11.5px;max-height:14em;overflow:auto}
.best{font-size:15px;background:#e8f2fb;border-left:3px solid #2f7ebc;padding:8px 12px}
"""


def build_report(
    out_root: Path,
    output: Path,
    pairs: list[tuple[str, str]] | None = None,
    metric: str = "accuracy",
    post_method: str = "zero-shot",
    n_boot: int = 1000,
) -> Path:
    """Scan the runs folder, compute the ranking analysis if pairs are given, write the HTML file."""
    output = Path(output)
    _check_output(output)  # before the analysis, which can take a while
    runs, skipped = load_runs(Path(out_root))
    comparison = compare_runs(runs, pairs, metric, post_method, n_boot) if pairs else None
    page = render(runs, skipped, comparison, title=f"softeval report: {Path(out_root)}")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(page, encoding="utf-8")
    return output


def render(
    runs: list[Run], skipped: list[tuple[Path, str]], comparison: Comparison | None, title: str
) -> str:
    """The whole page as a string."""
    runs = sorted(runs, key=lambda r: (r.task, r.model, METHODS.index(r.method), r.seed))
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="muted">{len(runs)} finished runs · {len({r.model for r in runs})} models · '
        f"{len({r.task for r in runs})} tasks · generated {generated}</p>",
    ]
    if skipped:
        items = "".join(f"<li><code>{escape(str(p))}</code>: {escape(why)}</li>" for p, why in skipped)
        parts.append(f'<div class="note">Skipped {len(skipped)} folder(s):<ul>{items}</ul></div>')
    if not runs:
        parts.append("<p>No finished runs found.</p>")
    else:
        parts += [
            _metrics_section(runs),
            _format_section(runs),
            _decomposition_section(runs),
            _knowledge_section(runs),
            _curves_section(runs),
            series_section(runs),
        ]
        if comparison is not None:
            parts.append(_ranking_section(comparison))
        parts.append(_samples_section(runs))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}{TABLE_CSS}</style></head>"
        f"<body><main>{''.join(parts)}</main></body></html>\n"
    )


def _metrics_section(runs: list[Run]) -> str:
    columns = ("task", "model", "kind", "method", "seed", "n", *METRICS, "top answer")
    rows = (
        f"<tr><td>{escape(r.task)}</td><td>{escape(r.model)}</td><td>{escape(kind_label(r.model_kind, r.results.get('model_kind_source')))}</td>"
        f'<td>{escape(r.method)}</td><td class="num">{r.seed}</td>'
        f'<td class="num">{escape(str(r.results.get("n", "")))}</td>'
        + "".join(metric_cell(r.metric(m)) for m in METRICS)
        + f'<td class="num">{escape(top_answer(r.results) or "–")}</td></tr>'
        for r in runs
    )
    return (
        '<h2>Metrics</h2><p class="muted">Each value with its 95% Wilson interval. '
        "accuracy is the benchmark's strict score; knowledge_accuracy is accuracy among items that "
        "followed the format; letter_loglik_accuracy and the cloze scores need no generation at all. top "
        "answer is the most "
        "frequent strict answer and its share: one letter for most items is a label prior, not "
        "knowledge.</p>"
        + table(columns, rows)
    )


def _format_section(runs: list[Run]) -> str:
    return (
        '<h2>Format-following against accuracy</h2><p class="muted">Points on the diagonal '
        "lose nothing to format; a method that moves points right (more format) without moving "
        "them up is fixing format, not adding knowledge.</p>"
        + plots.img(plots.format_vs_accuracy(runs), "format_rate against accuracy per method")
    )


def _decomposition_section(runs: list[Run]) -> str:
    figs = "".join(
        plots.img(plots.decomposition(runs, task), f"knowledge versus format on {task}")
        for task in sorted({r.task for r in runs})
    )
    return (
        '<h2>Knowledge versus format, per model</h2><p class="muted">accuracy = format_rate × '
        "knowledge_accuracy. A base model with high knowledge_accuracy but low format_rate is "
        "underrated by its zero-shot score.</p>" + figs
    )


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _paired_cell(row: PairedRow | None) -> str:
    if row is None:
        return '<td class="num">–</td>'
    t = row.test
    p = "–" if t.p_value is None else (f"{t.p_value:.2g}" if t.p_value < 0.01 else f"{t.p_value:.3f}")
    return (f'<td class="num">{t.difference:+.3f}<br><span class="ci">[{t.ci_low:.3f}, {t.ci_high:.3f}] '
            f"p={p}</span></td>")


def _knowledge_section(runs: list[Run]) -> str:
    """Per task: the format-free references (cloze, letter log-likelihood) beside each method's strict
    accuracy per model, the soft prompt's label-prior check, paired tests, and why outputs failed."""
    tests = paired_method_tests(runs, pairs=VERDICT_PAIRS)  # the table's pairs and the verdicts' at once
    paired = {(r.task, r.model, r.test.a): r for r in tests if r.test.b == "soft-prompt"}
    said = verdicts(runs, tests)
    blocks = []
    for task in sorted({r.task for r in runs}):
        task_runs = [r for r in runs if r.task == task]
        first: dict[tuple[str, str], Run] = {}
        for run in sorted(task_runs, key=lambda r: r.seed):
            first.setdefault((run.model_key, run.method), run)
        models = sorted({r.model_key for r in task_runs})
        rows, bars = [], []
        for model in models:
            values = {}
            for (m, method), run in first.items():
                if m == model:
                    for metric in METRICS:
                        if run.metric(metric):
                            values[(metric, method)] = run.metric(metric)
            bars.append((model, values))
            cloze_from = next((meth for meth in METHODS if (("cloze_accuracy", meth) in values)), None)
            cells = [metric_cell(values.get(("cloze_accuracy", cloze_from))),
                     metric_cell(values.get(("cloze_accuracy_norm", cloze_from))),
                     metric_cell(values.get(("letter_loglik_accuracy", cloze_from or "zero-shot")))]
            cells += [metric_cell(values.get(("accuracy", meth))) for meth in METHODS]
            cells += [metric_cell(values.get(("permutation_consistency", "soft-prompt"))),
                      metric_cell(values.get(("circular_accuracy", "soft-prompt")))]
            cells += [_paired_cell(paired.get((task, model, "zero-shot"))),
                      _paired_cell(paired.get((task, model, "few-shot")))]
            note = "" if cloze_from in (None, "zero-shot") else f' <span class="ci">(cloze from {escape(cloze_from)})</span>'
            rows.append(f"<tr><td>{escape(model)}{note}</td>{''.join(cells)}</tr>")
        if not any(("cloze_accuracy", meth) in v or ("accuracy", meth) in v for _, v in bars for meth in METHODS):
            continue
        columns = (
            "model", "cloze", "cloze per char", "letter log-lik.", "zero-shot", "few-shot", "soft-prompt",
            "soft-prompt permutation consistency", "soft-prompt circular acc.", "soft − zero-shot",
            "soft − few-shot")
        figure = plots.img(plots.knowledge_bars(bars, task), f"cloze reference and strict accuracy on {task}")
        blocks.append(f"<h3>{escape(task)}</h3>{_verdicts_block([v for v in said if v.task == task])}"
                      f"{table(columns, rows)}"
                      f"{figure}{_failures_block(task_runs, task)}")
    if not blocks:
        return ""
    return (
        '<h2>Knowledge: format-free references, label priors, paired tests</h2><p class="muted">'
        "cloze: the option whose text is most likely after the cloze prompt (raw sum, and per character: "
        "lm-eval's acc and acc_norm), measured in the zero-shot run; letter log-lik.: the most likely "
        "option letter after the lettered prompt. zero-/few-/soft-prompt: strict accuracy. Permutation "
        "consistency: share of items whose chosen option (by letter likelihood) is the same content in "
        "every order of the options; near 0 means a letter prior (\"always D\"), not knowledge; circular "
        "acc.: right in every order. Differences are paired (same items): 95% Newcombe interval and "
        "McNemar's exact p.</p>" + "".join(blocks)
    )


def _verdicts_block(found: list[Verdict]) -> str:
    """What the task's numbers mean, a sentence per model and pair of methods (docs/knowledge.md)."""
    lines = "".join(
        f'<p><b>{escape(v.model)}, {escape(v.title())}:</b> {escape(v.sentence)}.<br>'
        f'<span class="ci">{escape(v.numbers())}</span></p>' for v in found)
    return f'<div class="verdict">{lines}</div>' if lines else ""


def _failures_block(task_runs: list[Run], task: str) -> str:
    bars, details = [], []
    for run in task_runs:
        try:
            samples = read_samples(run.path)
        except (OSError, ValueError):
            samples = []
        failures = run.results.get("format_failures")
        if failures is None and samples and any("failure" in s for s in samples):
            failures = count_causes(samples)
        if not failures:
            continue
        n = int(run.results.get("n") or len(samples) or 0)
        label = f"{run.model} · {run.method}" + (f" · s{run.seed}" if run.seed else "")
        bars.append((label, (failures, n)))
        examples = []
        for cause in CAUSES:
            picked = [s for s in samples if s.get("failure") == cause][:FAILURE_EXAMPLES]
            examples += [
                f"<tr><td>{escape(cause)}</td><td><code>{escape(str(s.get('id')))}</code></td>"
                f"<td>{escape(str(s.get('gold')))}</td><td>{'yes' if s.get('hit_max_new_tokens') else 'no'}</td>"
                f"<td><pre>{escape(str(s.get('output', '')))}</pre></td></tr>" for s in picked]
        counts = ", ".join(f"{c} {failures['causes'].get(c, 0)}" for c in CAUSES if failures["causes"].get(c))
        if examples:
            details.append(
                f"<details><summary>{escape(label)}: {failures.get('failed', 0)} of {n} failed the format "
                f"({escape(counts)}); {failures.get('hit_max_new_tokens', 0)} hit max_new_tokens</summary>"
                + table(("cause", "id", "gold", "hit limit", "output"), examples) + "</details>")
    if not bars:
        return ""
    return plots.img(plots.failure_bars(bars, task), f"format failure causes on {task}") + "".join(details)


def _check_output(output: Path) -> None:
    """The report's file: not a folder, and not below a file (its missing folders are created)."""
    if output.is_dir():
        raise UserError(f"-o {output} is a folder: give the report's file name, e.g. -o {output / REPORT_FILE}")
    parent = next(p for p in output.absolute().parents if p.exists())
    if not parent.is_dir():
        raise UserError(f"-o {output}: {parent} is a file, not a folder")


def _curves_section(runs: list[Run]) -> str:
    curves, damaged = [], []
    for run in runs:
        path = run.path / CURVE_FILE
        if run.method == "soft-prompt" and path.is_file():
            try:
                rows = read_curve(path)
            except ValueError as err:
                damaged.append(f"{run.rel}/{CURVE_FILE} is damaged ({str(err).splitlines()[0]}): not drawn")
                continue
            if rows:
                curves.append((run, rows))
    notes = "".join(f'<p class="muted">{escape(d)}</p>' for d in damaged)
    if not curves:
        return f'<h2>Learning curves</h2><p class="muted">No soft-prompt runs with {CURVE_FILE}.</p>{notes}'
    more = notes + (
        f'<p class="muted">Showing the first {MAX_CURVES} of {len(curves)}.</p>'
        if len(curves) > MAX_CURVES
        else ""
    )
    return (
        '<h2>Learning curves (soft-prompt tuning)</h2><p class="muted">Loss on the left axis; '
        "format_rate and accuracy on a held-out tuning slice on the right. Format typically "
        "saturates within a few dozen steps while accuracy stays flat: tuning teaches the format, "
        "not the answers.</p>"
        + more
        + plots.img(plots.learning_curves(curves[:MAX_CURVES]), "soft-prompt learning curves")
    )


def _corr_cells(row: Correlation) -> str:
    def cell(value: float | None, lo: float | None, hi: float | None) -> str:
        if value is None or value != value:
            return '<td class="num">n/a</td>'
        ci = f'<br><span class="ci">[{lo:.2f}, {hi:.2f}]</span>' if lo is not None and hi is not None else ""
        return f'<td class="num">{value:.3f}{ci}</td>'

    return cell(row.kendall_tau, row.ci_low, row.ci_high) + cell(
        row.spearman_rho, row.spearman_ci_low, row.spearman_ci_high
    )


def _ranking_section(c: Comparison) -> str:
    pairs = ", ".join(f"{escape(b)} → {escape(p)}" for b, p in c.pairs)
    columns = ("task", "base method", "Kendall τ", "Spearman ρ", "pairs", "items")
    rows = [
        f"<tr><td>{escape(r.task)}</td><td>{escape(r.method)}</td>{_corr_cells(r)}"
        f'<td class="num">{r.n_pairs}</td><td class="num">{r.n_items}</td></tr>'
        for r in [*c.results, *c.average]
    ]
    best = ""
    if c.best_method:
        b = c.best_method
        leads = "; ".join(
            f"{escape(x['method'])} {x['tau_difference']:+.2f}"
            + (f" [{x['ci_low']:.2f}, {x['ci_high']:.2f}]" if x["ci_low"] is not None else "")
            for x in b["ahead_of"]
        )
        verdict = (
            "clearly: every paired interval of its lead is above 0"
            if b["clearly_best"]
            else "but not clearly: a paired interval of its lead includes 0"
        )
        best = (
            f'<p class="best">Best predictor of the post-trained ranking: <b>{escape(b["method"])}</b> '
            f"(mean τ {b['kendall_tau']:.2f}), {verdict}."
            + (f"<br>Lead in τ over {leads}.</p>" if leads else "</p>")
        )
    notes = "".join(f'<div class="note">{escape(n)}</div>' for n in [*c.notes, *c.skipped])
    figs = "".join(
        plots.img(plots.rank_scatter(c, task), f"rank scatter on {task}")
        for task in sorted({r.task for r in c.results})
    )
    return (
        f"<h2>Ranking: do base-model scores predict the post-trained ranking?</h2>"
        f'<p class="muted">Pairs: {pairs}. Post-trained models scored by '
        f"{escape(c.post_method)} {escape(c.metric)}. Intervals: 95% percentile bootstrap over test "
        f"items ({c.n_boot} replicates; every model rescored on the same resampled items).</p>"
        f"{best}{table(columns, rows)}{notes}{figs}"
    )


def _samples_section(runs: list[Run]) -> str:
    blocks = []
    for run in runs:
        if not (run.path / SAMPLES_FILE).is_file():
            continue
        samples = read_samples(run.path)
        differ = [s for s in samples if bool(s.get("correct")) != bool(s.get("lenient_correct"))]
        if not differ:
            continue
        rows = (
            f"<tr><td><code>{escape(str(s.get('id')))}</code></td><td>{escape(str(s.get('gold')))}</td>"
            f"<td>{escape(str(s.get('strict')))}</td><td>{escape(str(s.get('lenient')))}</td>"
            f"<td>{'✓' if s.get('correct') else '✗'} / {'✓' if s.get('lenient_correct') else '✗'}</td>"
            f"<td><pre>{escape(str(s.get('output', '')))}</pre><details><summary>prompt</summary>"
            f"<pre>{escape(str(s.get('prompt', '')))}</pre></details></td></tr>"
            for s in differ[:MAX_DISAGREEMENTS]
        )
        shown = f" (first {MAX_DISAGREEMENTS} shown)" if len(differ) > MAX_DISAGREEMENTS else ""
        blocks.append(
            f"<details><summary>{escape(run.model)} · {escape(run.task)} · {escape(run.method)} · seed "
            f"{run.seed}: {len(differ)} of {len(samples)} items disagree{shown}</summary>"
            + table(("id", "gold", "strict", "lenient", "correct strict / lenient", "output"), rows)
            + "</details>"
        )
    intro = (
        '<h2>Where strict and lenient scoring disagree</h2><p class="muted">Items the strict '
        "scorer marks differently from the lenient one: usually a right answer in the wrong "
        "format. Click a run to open its items.</p>"
    )
    return intro + ("".join(blocks) or "<p>No disagreements.</p>")
