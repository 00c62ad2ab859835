"""Results as data for notebooks: an output root's finished runs, a run's items and the comparison that
`softeval compare` prints, as pandas DataFrames (docs/guide/python-api.md).

    from softeval.results import compare, load_runs, load_samples

    runs = load_runs("runs")                       # one row per finished run
    items = load_samples(runs.iloc[0])             # one row per scored item of a run
    record = compare("runs")                       # the record of `softeval compare --json`

Runs are read by the reader every command uses (softeval.store.format.scan, through analysis.compare.load_runs:
the rules of what a finished, valid run is live there, docs/reference/run-format.md). A folder that is not one (damaged,
unfinished, of another format) is left out and named with the reason: one ``SkippedRunWarning`` per folder, shown
every time, and ``df.attrs["skipped"]``, a list of ``{"path", "reason"}``.

pandas is an extra (``pip install 'softeval[pandas]'``), imported only inside these functions; without it each
function refuses in one line (a UserError naming the extra).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from softeval.analysis.compare import Correlation, parse_pairs
from softeval.analysis.compare import load_runs as read_runs
from softeval.analysis.compare_record import compare_record
from softeval.analysis.lmeval_groups import GroupScore
from softeval.analysis.paired import PairedTest
from softeval.constants import SOURCE_METRICS
from softeval.errors import UserError, shown
from softeval.methods import names as method_names
from softeval.metrics import METRIC_TABLE, top_answer
from softeval.store.format import Run, RunFormatError, check_run
from softeval.store.identity import identity_of

if TYPE_CHECKING:
    import pandas as pd

PANDAS_EXTRA = "pip install 'softeval[pandas]'"

# load_runs' columns before the metrics (those of the run's folder and results.json) and after them (its
# answers, format failures, timing, then its identity: IDENTITY_PREFIX + each option of it).
RUN_COLUMNS = ("model", "model_kind", "model_kind_source", "task", "method", "seed", "prompt_variant", "n", "series",
               "step")
METRIC_SUFFIXES = ("", "_low", "_high", "_n")  # accuracy, accuracy_low, accuracy_high, accuracy_n
TAIL_COLUMNS = ("top_answer", "format_failed", "hit_max_new_tokens", "truncated_prompts", "unscorable",
                "finished_at", "wall_seconds", "softeval_version", "lm_eval", "path", "rel",
                "identity_sha256", "identity")
IDENTITY_PREFIX = "config."
CAUSE_PREFIX = "cause_"
# load_samples' first columns (samples.jsonl's fields, ``failure`` renamed ``cause``); its other fields follow,
# then the run's own (SAMPLE_RUN_COLUMNS).
SAMPLE_COLUMNS = ("id", "output", "strict", "lenient", "gold", "correct", "lenient_correct", "format_ok", "cause",
                  "hit_max_new_tokens", "prompt")
SAMPLE_RUN_COLUMNS = ("model", "task", "method", "seed", "path")
# compare's spread tables (analysis/spread.py: Spread.row, SpreadTest.row)
SPREAD_COLUMNS = ("model", "task", "method", "seed", "variants", "k", "n",
                  *(f"{m}_{s}" for m in ("accuracy", "format_rate") for s in ("mean", "min", "max", "std", "values")))
SPREAD_TEST_COLUMNS = ("model", "task", "seed", "method", "baseline", "k", "n", "std", "baseline_std", "difference",
                       "low", "high", "p", "compared", "sentence")


class SkippedRunWarning(UserWarning):
    """A folder under an output root that is not a finished, valid run, left out; the message names it and why."""


# shown each time (a notebook cell run again names the folder again), unless the user's own filter says otherwise
warnings.filterwarnings("always", category=SkippedRunWarning, append=True)


def _pandas():
    try:
        import pandas
    except ImportError:
        raise UserError(f"softeval's results as DataFrames need pandas: {PANDAS_EXTRA}") from None
    return pandas


def _name_skipped(skipped: Iterable[tuple[Path, str]]) -> list[dict[str, str]]:
    """Each skipped folder as {path, reason}, each told as a SkippedRunWarning."""
    named = [{"path": str(path), "reason": why} for path, why in skipped]
    for item in named:
        warnings.warn(f"skipped {item['path']}: {item['reason']}", SkippedRunWarning, stacklevel=3)
    return named


def load_runs(root: str | os.PathLike) -> pd.DataFrame:
    """One row per finished run under ``root`` (an output root, ``softeval run --out``), ordered by task, model,
    method (zero-shot, few-shot, soft-prompt, lora: the registry's order) and seed. Columns:

    - ``model``, ``model_kind`` (base, post-trained), ``model_kind_source``, ``task``, ``method``, ``seed``,
      ``prompt_variant`` (0: the task's own prompt; docs/guide/prompt-variants.md), ``n`` (scored items), ``series``
      and ``step`` (a checkpoint of a series; else None): results.json's;
    - each metric (accuracy, format_rate, knowledge_accuracy, lenient_accuracy, f1, ... as the runs have them;
      softeval.metrics.METRICS first) as four columns: ``<metric>`` (the value), ``<metric>_low`` and ``<metric>_high``
      (its 95% interval: Wilson's, a mean's for f1) and ``<metric>_n`` (the items it is over: for
      knowledge_accuracy those that followed the format); NaN where a run lacks the metric;
    - ``top_answer`` (the most frequent strict answer and its share, ``"B 9/16"``), ``format_failed`` and
      ``cause_<cause>`` (format failures and their causes: empty, max_new_tokens, wrong_style, refusal_or_echo,
      other), ``hit_max_new_tokens``, ``truncated_prompts``, ``unscorable``, ``finished_at``, ``wall_seconds``,
      ``softeval_version``, ``lm_eval`` (an lm-eval task's own scores, a dict; else None);
    - ``path`` (the run folder) and ``rel`` (under ``root``);
    - the run's identity (docs/reference/run-format.md, "Run identity": every option it ran with that its method
      reads): ``identity`` (a dict), ``identity_sha256`` (the sha256 of its JSON, keys sorted: equal for two runs of
      the same options), and ``config.<option>`` for each of its options (None where a run's method does not read
      the option).

    Folders skipped (damaged, unfinished) are named: a SkippedRunWarning each and ``df.attrs["skipped"]``
    ([{path, reason}]); ``df.attrs["root"]`` is ``root``."""
    pd = _pandas()
    runs, skipped = read_runs(Path(root))
    order = {m: i for i, m in enumerate(method_names())}
    rows = [_run_row(run) for run in sorted(runs, key=lambda r: (r.task, r.model, order.get(r.method, len(order)),
                                                                   r.method, r.seed))]
    metrics = [m.name for m in METRIC_TABLE if m.every_run or any(m.name in r["metrics"] for r in rows)]
    metrics += sorted({m for r in rows for m in r["metrics"]} - set(metrics))
    causes = list(dict.fromkeys(c for r in rows for c in r["causes"]))
    options = list(dict.fromkeys(k for r in rows for k in r["identity"]))
    columns = [*RUN_COLUMNS, *(m + s for m in metrics for s in METRIC_SUFFIXES), *TAIL_COLUMNS[:2],
               *(CAUSE_PREFIX + c for c in causes), *TAIL_COLUMNS[2:], *(IDENTITY_PREFIX + o for o in options)]
    records = [{**r["flat"], **{m + s: v for m, four in r["metrics"].items() for s, v in zip(METRIC_SUFFIXES, four)},
                **{CAUSE_PREFIX + c: k for c, k in r["causes"].items()},
                **{IDENTITY_PREFIX + o: v for o, v in r["identity"].items()}} for r in rows]
    df = pd.DataFrame.from_records(records, columns=columns)
    df.attrs["skipped"] = _name_skipped(skipped)
    df.attrs["root"] = str(root)
    return df


def _run_row(run: Run) -> dict[str, Any]:
    """One run's row in parts: ``flat`` (the columns as they are), ``metrics`` (name -> value, low, high, n),
    ``causes`` (cause -> count) and ``identity`` (option -> value)."""
    r = run.results
    metrics = {name: (m.get("value"), m.get("ci_low"), m.get("ci_high"), m.get("n"))
               for name, m in r["metrics"].items() if name != SOURCE_METRICS and isinstance(m, dict)}
    failures = r.get("format_failures") or {}
    identity = identity_of(r.get("config") or {})
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode("utf-8")).hexdigest()
    flat = {**{c: r.get(c) for c in RUN_COLUMNS}, "prompt_variant": run.variant, "top_answer": top_answer(r),
            "format_failed": failures.get("failed"),
            "hit_max_new_tokens": failures.get("hit_max_new_tokens"), "truncated_prompts": r.get("truncated_prompts"),
            "unscorable": r.get("unscorable"), "finished_at": r.get("finished_at"),
            "wall_seconds": r.get("wall_seconds"), "softeval_version": r.get("softeval_version"),
            "lm_eval": r["metrics"].get(SOURCE_METRICS), "path": str(run.path), "rel": run.rel,
            "identity_sha256": digest, "identity": identity}
    return {"flat": flat, "metrics": metrics, "causes": dict(failures.get("causes") or {}), "identity": identity}


def load_samples(run: str | os.PathLike | Mapping[str, Any] | Any) -> pd.DataFrame:
    """One row per scored item of a run, in the order it scored them. ``run``: a run folder
    (``<root>/<model>/<task>/<method>/seed<N>``), or a row of load_runs (its ``path``).

    The run is read and checked as every reader checks it (store.format.check_run: a damaged or unfinished run is
    refused in one line naming why). Columns are samples.jsonl's fields (docs/reference/run-format.md), these first:
    ``id``, ``output`` (the generated text), ``strict`` and ``lenient`` (the answer each reader found; None: none),
    ``gold``, ``correct`` (the strict answer is right), ``lenient_correct``, ``format_ok`` (the output follows the
    task's format), ``cause`` (samples.jsonl's ``failure``: why the format failed, one of empty, max_new_tokens,
    wrong_style, refusal_or_echo, other; None where it held), ``hit_max_new_tokens``, ``prompt``; then the task's
    other fields as the file has them (multiple choice: ``letter_loglik_pred``, ``cloze_scores``, ...; a missing
    field is NaN); last the run's ``model``, ``task``, ``method``, ``seed`` and ``path``, so the items of several
    runs concatenate."""
    pd = _pandas()
    run_dir = _run_dir(run)
    try:
        checked = check_run(run_dir.parent, run_dir, keep_samples=True)
    except RunFormatError as exc:
        raise UserError(f"{run_dir} cannot be read: {exc}") from None
    rows = [{("cause" if k == "failure" else k): v for k, v in sample.items()} for sample in checked.samples or []]
    others = [k for k in dict.fromkeys(k for row in rows for k in row) if k not in SAMPLE_COLUMNS]
    own = {"model": checked.model, "task": checked.task, "method": checked.method, "seed": checked.seed,
           "path": str(checked.path)}
    df = pd.DataFrame.from_records([{**row, **own} for row in rows],
                                   columns=[*SAMPLE_COLUMNS, *(k for k in others if k not in own), *own])
    df.attrs["path"] = str(checked.path)
    return df


def _run_dir(run: Any) -> Path:
    """The folder ``run`` names: a path, or a row (a pandas Series, a dict, a namedtuple) with a ``path``."""
    if isinstance(run, (str, os.PathLike)):
        path = Path(run)
    else:
        try:
            path = Path(run["path"] if not hasattr(run, "_fields") else run.path)
        except (KeyError, TypeError, AttributeError, IndexError):
            raise UserError(f"load_samples takes a run folder or a row of load_runs (with its 'path'), not "
                            f"{shown(type(run).__name__)}") from None
    if not path.is_dir():
        raise UserError(f"run folder {shown(str(path))} does not exist")
    return path


@dataclass
class Compared:
    """What compare returns: ``record``, exactly what `softeval compare --json` prints for the same arguments, and
    its tables as DataFrames: ``paired_tests`` (record["paired_tests"]: per task, model and pair of methods a, b,
    McNemar's exact test on the items both scored: n, both, a_only, b_only, neither, accuracy_a, accuracy_b,
    difference = b - a with its 95% interval ci_low, ci_high, p_value, settings_differ), ``lm_eval_groups``
    (record["lm_eval_groups"]), ``ranking`` and ``ranking_mean`` (record["results"] and record["average"]: Kendall
    tau and Spearman rho per task and base method, with intervals; None without pairs) and ``skipped``
    (record["skipped_folders"], each also told as a SkippedRunWarning). The ranking's best method, notes and what it
    left out are record["best_method"], record["notes"] and record["skipped"]. ``spread`` (record["spread"]): per
    model, task, method and seed scored under two or more prompt variants, accuracy and format_rate across them
    (``<metric>_mean``, ``_min``, ``_max``, ``_std``, ``_values``); ``spread_tests`` (record["spread_tests"]): the
    treatment's standard deviation across variants against each other method's, with its bootstrap interval and the
    sentence that says what it shows (analysis/spread.py)."""

    record: dict[str, Any]
    paired_tests: pd.DataFrame
    lm_eval_groups: pd.DataFrame
    ranking: pd.DataFrame | None
    ranking_mean: pd.DataFrame | None
    skipped: list[dict[str, str]]
    spread: pd.DataFrame | None = None
    spread_tests: pd.DataFrame | None = None


def compare(root: str | os.PathLike, pairs: Sequence[tuple[str, str] | str] | Mapping[str, str] = (),
            metric: str = "accuracy", post_method: str | None = None,
            post_scores: str | os.PathLike | None = None, n_boot: int = 2000) -> Compared:
    """The comparison `softeval compare ROOT` makes, as data (Compared): built by the same function
    (analysis.compare_record), so the numbers are the CLI's. ``pairs``: base models and their post-trained
    versions, as (BASE, POST) tuples, ``"BASE=POST"`` strings or a dict, for the ranking (at least 3; none: no
    ranking); ``metric``: what to test and rank by; ``post_method``: how the post-trained side is scored (None: the
    reference method, zero-shot; ``"best"``: each one's best); ``post_scores``: that side from a CSV or JSON file
    instead; ``n_boot``: bootstrap replicates."""
    pd = _pandas()
    if not Path(root).is_dir():
        raise UserError(f"runs folder {shown(str(root))} does not exist")
    given = list(pairs.items()) if isinstance(pairs, Mapping) else list(pairs)
    parsed = parse_pairs([p if isinstance(p, str) else "=".join(p) for p in given])
    record = compare_record(Path(root), parsed, metric, post_method, n_boot, post_scores).to_json()

    def table(key: str, cols: list[str]) -> pd.DataFrame:
        return pd.DataFrame.from_records(record[key], columns=cols)

    paired_cols = ["task", "model", "metric", *(f.name for f in fields(PairedTest)), "settings_differ"]
    ranking_cols = [f.name for f in fields(Correlation) if not f.name.startswith("boot_")]
    ranked = "results" in record
    return Compared(record, table("paired_tests", paired_cols),
                    table("lm_eval_groups", [f.name for f in fields(GroupScore)]),
                    table("results", ranking_cols) if ranked else None,
                    table("average", ranking_cols) if ranked else None,
                    _name_skipped((Path(s["path"]), s["reason"]) for s in record["skipped_folders"]),
                    table("spread", list(SPREAD_COLUMNS)), table("spread_tests", list(SPREAD_TEST_COLUMNS)))
