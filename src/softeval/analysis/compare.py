"""Does a method's score on base models predict how their post-trained versions rank?

For each task and each method the base models were run with, Kendall tau and Spearman rho between the
base models' scores and their post-trained partners' scores, with a percentile bootstrap over test
items: each replicate draws one set of item indices, rescores *every* model (bases and partners) on
those same items, and recomputes both rankings. That is what makes the interval honest about how much
the ranking depends on which items happened to be in the test set, and it makes replicates paired
across methods, so "soft-prompt beats zero-shot" can get its own interval.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from softeval.analysis.choices import post_methods, reference_method  # the options' choices, kept light
from softeval.analysis.post_scores import PostScores, boot_post_scores, check_pairs
from softeval.analysis.ranking_stats import (
    MIN_BOOT,
    ItemScores,
    batched_rank_correlations,
    bootstrap_scores,
    percentile_interval,
    rank_correlations,
)
from softeval.checks import is_whole
from softeval.errors import UserError, shown
from softeval.methods import names as method_names
from softeval.metrics import COMPARED, METRIC
from softeval.store.format import SAMPLES_FILE, Run, read_samples, scan

MIN_PAIRS = 3


@dataclass
class Correlation:
    """One row of the answer: a task (or the mean over tasks) and a method of the base models."""

    task: str
    method: str
    kendall_tau: float | None
    spearman_rho: float | None
    ci_low: float | None  # Kendall tau's interval; tau is the headline statistic
    ci_high: float | None
    spearman_ci_low: float | None
    spearman_ci_high: float | None
    n_pairs: int
    n_items: int
    base_scores: dict[str, float] = field(default_factory=dict)
    post_scores: dict[str, float] = field(default_factory=dict)
    boot_tau: np.ndarray | None = field(default=None, repr=False)
    boot_rho: np.ndarray | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        del data["boot_tau"], data["boot_rho"]
        return json_safe(data)


@dataclass
class Comparison:
    metric: str
    post_method: str
    pairs: list[tuple[str, str]]
    n_boot: int
    results: list[Correlation]
    average: list[Correlation]
    best_method: dict[str, Any] | None
    notes: list[str]
    skipped: list[str]
    post_file: str | None = None  # --post-scores FILE: the post-trained side came from this file, not from runs

    @property
    def post_side(self) -> str:
        """How every output names the post-trained side: the runs' method, or the file the scores came from."""
        if self.post_file is not None:
            return f"scores from {self.post_file} (--post-scores, not runs)"
        return f"{self.post_method} {self.metric}"

    def to_json(self) -> dict[str, Any]:
        return json_safe({
            "metric": self.metric, "post_method": None if self.post_file else self.post_method,
            "post_scores_file": self.post_file, "post_side": self.post_side, "pairs": [list(p) for p in self.pairs],
            "n_boot": self.n_boot, "confidence": 0.95,
            "ci_of": "kendall_tau (percentile bootstrap over items)",
            "results": [r.to_json() for r in self.results], "average": [r.to_json() for r in self.average],
            "best_method": self.best_method, "notes": self.notes, "skipped": self.skipped,
        })


def load_item_scores(runs: list[Run], metric: str) -> ItemScores:
    """Per-item outcomes from samples.jsonl; several seeds are averaged item by item."""
    num_field, den_field = METRIC[metric].field, METRIC[metric].among
    per_seed: list[dict[str, tuple[float, float]]] = []
    for run in sorted(runs, key=lambda r: r.seed):
        try:  # runs come from scan, which checked samples.jsonl against results.json
            samples = samples_of(run)
        except (OSError, ValueError) as exc:
            raise UserError(f"{run.rel}: {SAMPLES_FILE} cannot be read ({exc}), so items cannot be "
                            "resampled") from None
        rows: dict[str, tuple[float, float]] = {}
        for row_no, sample in enumerate(samples, 1):
            if sample.get(num_field) is None:
                raise UserError(f"{run.rel}: {SAMPLES_FILE} row {row_no} has no '{num_field}', "
                                f"so {metric} cannot be computed per item")
            den = 1.0 if den_field is None else float(bool(sample.get(den_field)))
            rows[str(sample["id"])] = (float(bool(sample[num_field])) * den, den)
        per_seed.append(rows)
    ids = [item for item in per_seed[0] if all(item in rows for rows in per_seed)]
    num = np.array([np.mean([rows[i][0] for rows in per_seed]) for i in ids])
    den = np.array([np.mean([rows[i][1] for rows in per_seed]) for i in ids])
    return ItemScores(ids, num, den)


def runs_of(runs: list[Run], name: str) -> list[Run]:
    """A model's runs, by the name it was run under or by its folder name."""
    return [r for r in runs if name in (r.model, r.model_folder)]


def parse_pairs(specs: Sequence[str]) -> list[tuple[str, str]]:
    pairs = []
    for spec in specs:
        base, sep, post = spec.partition("=")
        if not sep or not base.strip() or not post.strip():
            raise UserError(f"--pair {shown(spec)}: expected BASE=POST, "
                            "e.g. --pair smollm2-135m=smollm2-135m-instruct")
        pairs.append((base.strip(), post.strip()))
    return pairs


def compare_runs(runs: list[Run], pairs: list[tuple[str, str]], metric: str = "accuracy",
                 post_method: str | None = None, n_boot: int = 2000, seed: int = 0,
                 post_scores: PostScores | None = None) -> Comparison:
    """Rank correlations per task and method, their mean over tasks, and the best-predicting method.
    ``post_method``: how the post-trained models' runs are scored (None: ``reference_method()``).
    ``post_scores``: the post-trained side read from a file (analysis.post_scores) instead of runs."""
    post_method = reference_method() if post_method is None else post_method
    _check_inputs(runs, pairs, metric, post_method, post_scores)
    if not is_whole(n_boot) or n_boot < MIN_BOOT:
        raise UserError(f"--n-boot must be at least {MIN_BOOT} (a 95% interval needs replicates to spread), "
                        f"not {shown(n_boot)}")
    asked = _Asked(pairs, metric, post_method, n_boot, post_scores)
    results: list[Correlation] = []
    rng = np.random.default_rng(seed)
    for task in sorted({r.task for r in runs}):
        results.extend(_compare_task(asked, [r for r in runs if r.task == task], task, rng))
    if not results:
        raise UserError("nothing to correlate: " + "; ".join(asked.skipped or ["no task has runs of every model"]))
    if post_scores is not None:
        asked.notes.append(post_scores.note)
    average = _averages(results)
    best = _best(average, results)
    return Comparison(metric, post_method, pairs, n_boot, results, average, best, asked.notes, asked.skipped,
                      None if post_scores is None else post_scores.path)


def _check_inputs(runs: list[Run], pairs: list[tuple[str, str]], metric: str, post_method: str,
                  post_scores: PostScores | None) -> None:
    if metric not in COMPARED:
        raise UserError(f"--metric {shown(metric)}: choose one of {', '.join(COMPARED)}")
    if post_method not in post_methods():
        raise UserError(f"--post-method {shown(post_method)}: choose one of {', '.join(post_methods())}")
    if len(pairs) < MIN_PAIRS:
        raise UserError(f"compare needs at least {MIN_PAIRS} BASE=POST pairs (got {len(pairs)}): "
                        "a rank correlation over fewer models says nothing")
    names = [name for pair in pairs for name in pair]
    if len(set(names)) != len(names):
        raise UserError("each model may appear in only one pair, on one side")
    known = sorted({r.model for r in runs})
    if post_scores is not None:
        check_pairs(pairs, post_method, post_scores)
        names = [base for base, _ in pairs]
    for name in names:
        if not runs_of(runs, name):
            raise UserError(f"no finished runs for model {shown(name)}; "
                            f"models with runs: {', '.join(known) or 'none'}")


@dataclass
class _Asked:
    """What a comparison was asked, the same for every task, and what it says besides its rows: ``notes`` (beside
    the answer) and ``skipped`` (what was left out, and why)."""

    pairs: list[tuple[str, str]]
    metric: str
    post_method: str
    n_boot: int
    post_scores: PostScores | None
    notes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _compare_task(asked: _Asked, task_runs: list[Run], task: str, rng: np.random.Generator) -> list[Correlation]:
    """One task's rows (``task_runs``: its runs): per method every base model ran, the rank correlations of the
    base models' scores with the post-trained models', on the items every run scored; none, with why in
    ``asked.skipped``, where a model lacks what it needs."""
    post_side = _post_side(asked, task_runs, task)
    if post_side is None:
        return []
    filed, post_runs = post_side
    methods = _shared_methods(asked, task_runs, task)
    try:
        posts = [load_item_scores(chosen, asked.metric) for chosen in post_runs]
        bases = {m: [load_item_scores([r for r in runs_of(task_runs, b) if r.method == m], asked.metric)
                     for b, _ in asked.pairs] for m in methods}
    except UserError as exc:
        asked.skipped.append(f"{task}: {exc}")
        return []
    common = _common_items(asked, task, posts + [s for scores in bases.values() for s in scores])
    if common is None:
        return []
    if filed is None:
        posts = [s.aligned(common) for s in posts]
        post_point = [s.score() for s in posts]
        state = rng.bit_generator.state  # same item draws for every method: replicates are paired
        post_boot = bootstrap_scores(posts, asked.n_boot, rng)
    else:  # from the file: no items to resample; drawn from a generator of their own, the same for every method
        post_point = [row.score for row in filed]
        post_boot = boot_post_scores(filed, asked.n_boot, np.random.default_rng(rng.integers(2**63)))
        state = rng.bit_generator.state
    rows = []
    for m in methods:
        scores = [s.aligned(common) for s in bases[m]]
        base_point = [s.score() for s in scores]
        rng.bit_generator.state = state
        base_boot = bootstrap_scores(scores, asked.n_boot, rng)
        point = rank_correlations(base_point, post_point)
        if np.isnan(point[0]):
            asked.notes.append(f"{task}/{m}: scores are all equal on one side, so no ranking to correlate")
        rows.append(_row(task, m, point, batched_rank_correlations(base_boot, post_boot),
                         (len(asked.pairs), len(common)), {b: s for (b, _), s in zip(asked.pairs, base_point)},
                         {p: s for (_, p), s in zip(asked.pairs, post_point)}))
    return rows


def _post_side(asked: _Asked, task_runs: list[Run], task: str) -> tuple[list | None, list[list[Run]]] | None:
    """A task's post-trained side: the rows of the file (``asked.post_scores``; no runs) or, without one, each
    post-trained model's runs of the post method (None for the rows); None, with why in ``asked.skipped``, where
    a model of a pair has no runs (and no row) or a post-trained model lacks its post method's run."""
    pairs, from_file = asked.pairs, asked.post_scores
    absent = [name for pair in pairs for name in pair if not runs_of(task_runs, name)
              and (from_file is None or name not in {p for _, p in pairs})]
    if absent:
        asked.skipped.append(f"{task}: no runs for {', '.join(absent)}")
        return None
    if from_file is not None:
        filed = [from_file.get(post, task) for _, post in pairs]
        if None in filed:
            lacking = [post for (_, post), row in zip(pairs, filed) if row is None]
            asked.skipped.append(f"{task}: {from_file.path} has no score of {', '.join(lacking)}")
            return None
        return filed, []
    post_runs = []
    for _, post in pairs:
        chosen = _post_runs(asked, runs_of(task_runs, post), task, post)
        if chosen is None:
            return None
        post_runs.append(chosen)
    return None, post_runs


def _post_runs(asked: _Asked, mine: list[Run], task: str, post: str) -> list[Run] | None:
    """The runs of ``post`` (``mine``) that score it: those of the post method, or of its best method with
    --post-method best (a note says which); None, with why in ``asked.skipped``, where it has none."""
    method = asked.post_method if asked.post_method != "best" else _best_own_method(mine, asked.metric)
    chosen = [r for r in mine if r.method == method]
    if not chosen:
        have = ", ".join(sorted({r.method for r in mine}))
        asked.skipped.append(f"{task}: {post} has no {asked.post_method} run (has: {have}; try --post-method best)")
        return None
    if asked.post_method == "best":
        asked.notes.append(f"{task}: {post} scored by its best method, {method}")
    return chosen


def _shared_methods(asked: _Asked, task_runs: list[Run], task: str) -> list[str]:
    """The methods every base model of a task has a run of, in the registry's order; the others in
    ``asked.skipped``."""
    bases = [b for b, _ in asked.pairs]
    methods = [m for m in method_names() if all(any(r.method == m for r in runs_of(task_runs, b)) for b in bases)]
    for m in {r.method for b in bases for r in runs_of(task_runs, b)} - set(methods):
        asked.skipped.append(f"{task}/{m}: not every base model has a {m} run")
    return methods


def _common_items(asked: _Asked, task: str, every: list) -> list[str] | None:
    """The item ids every one of a task's item scores (``every``) has (a note where they differ); None, with why
    in ``asked.skipped``, where fewer than two are common."""
    common = sorted(set.intersection(*(set(s.ids) for s in every)))
    if any(len(s.ids) != len(common) for s in every):
        sizes = sorted({len(s.ids) for s in every})
        asked.notes.append(f"{task}: models were scored on different item sets (sizes {sizes}); "
                           f"correlating on the {len(common)} items common to all")
    if len(common) < 2:
        asked.skipped.append(f"{task}: fewer than 2 items common to all models")
        return None
    return common


def item_outcomes(run: Run, metric: str = "accuracy") -> dict[str, bool]:
    """Per item id, the run's outcome under a per-item metric (``correct`` for accuracy)."""
    num_field, den_field = METRIC[metric].field, METRIC[metric].among
    if den_field is not None:
        raise UserError(f"{metric} is a ratio over a subset of items; paired tests need a per-item metric")
    return {str(s["id"]): bool(s[num_field]) for s in samples_of(run) if s.get(num_field) is not None}


def samples_of(run: Run) -> list[dict[str, Any]]:
    """A run's samples: those its scan kept (``load_runs(keep_samples=True)``), else read from its folder."""
    return run.samples if run.samples is not None else read_samples(run.path)


def _best_own_method(runs: list[Run], metric: str) -> str | None:
    """The method under which a post-trained model scores best (by results.json, seeds averaged): highest, or
    lowest for a metric lower is better of."""
    by_method: dict[str, list[float]] = {}
    for r in runs:
        value = (r.metric(metric) or {}).get("value")
        if value is not None:
            by_method.setdefault(r.method, []).append(value)
    sign = 1.0 if METRIC[metric].higher_is_better else -1.0
    return max(by_method, key=lambda m: sign * float(np.mean(by_method[m])), default=None)


def _row(task: str, method: str, point: tuple[float, float], boot: tuple[np.ndarray, np.ndarray],
         sizes: tuple[int, int], base: dict[str, float], post: dict[str, float]) -> Correlation:
    """A row from (Kendall tau, Spearman rho), their replicates (``boot``, for the intervals) and the
    (pairs, items) they were computed over."""
    (tau, rho), (boot_tau, boot_rho) = point, boot
    t_lo, t_hi = percentile_interval(boot_tau)
    r_lo, r_hi = percentile_interval(boot_rho)
    return Correlation(task, method, tau, rho, t_lo, t_hi, r_lo, r_hi, *sizes, base, post, boot_tau, boot_rho)


def _averages(results: list[Correlation]) -> list[Correlation]:
    """Per method, the mean over tasks; each replicate averages the tasks' replicates."""
    rows = []
    for m in [m for m in method_names() if any(r.method == m for r in results)]:
        mine = [r for r in results if r.method == m]
        with warnings.catch_warnings():  # all-nan columns: nan is the right answer
            warnings.simplefilter("ignore", RuntimeWarning)
            boot_tau = np.nanmean(np.stack([r.boot_tau for r in mine]), axis=0)
            boot_rho = np.nanmean(np.stack([r.boot_rho for r in mine]), axis=0)
            tau = float(np.nanmean([_nan(r.kendall_tau) for r in mine]))
            rho = float(np.nanmean([_nan(r.spearman_rho) for r in mine]))
        rows.append(_row("(mean)", m, (tau, rho), (boot_tau, boot_rho),
                         (mine[0].n_pairs, sum(r.n_items for r in mine)), {}, {}))
    return rows


def _best(average: list[Correlation], results: list[Correlation]) -> dict[str, Any] | None:
    """The method with the highest mean tau over tasks, with paired intervals for its lead."""
    n_tasks = len({r.task for r in results})
    fair = [a for a in average if sum(r.method == a.method for r in results) == n_tasks
            and a.kendall_tau is not None and np.isfinite(a.kendall_tau)]
    if not fair:
        return None
    best = max(fair, key=lambda a: (a.kendall_tau, _nan(a.spearman_rho)))
    leads = []
    for other in fair:
        if other is not best:
            diff = best.boot_tau - other.boot_tau
            lo, hi = percentile_interval(diff)
            leads.append({"method": other.method, "tau_difference": best.kendall_tau - other.kendall_tau,
                          "ci_low": lo, "ci_high": hi})
    clear = bool(leads) and all(lead["ci_low"] is not None and lead["ci_low"] > 0 for lead in leads)
    return {"method": best.method, "by": "mean Kendall tau over tasks", "kendall_tau": best.kendall_tau,
            "ahead_of": leads, "clearly_best": clear}


def _nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def json_safe(value: Any) -> Any:
    """JSON-safe: nan becomes null, numpy scalars become floats."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return None if not np.isfinite(value) else float(value)
    return value


def load_runs(out_root: Path, keep_samples: bool = False) -> tuple[list[Run], list[tuple[Path, str]]]:
    """Finished runs read from the folders (the source of truth), plus what was skipped and why;
    ``keep_samples``: each run holds the samples its check read (``samples_of`` then reads none)."""
    if not Path(out_root).is_dir():
        raise UserError(f"runs folder {shown(str(out_root))} does not exist")
    report = scan(Path(out_root), keep_samples)
    return report.runs, report.skipped
