"""What `softeval compare` says about an output root, built once: the paired tests of the methods, the lm-eval
groups' scores, the folders skipped with the reason, each method's spread across prompt variants, and (given
BASE=POST pairs) whether the base models' scores
predict the post-trained ranking. The CLI prints it (as tables, or with --json as ``CompareRecord.to_json``), and
the library returns it as data (softeval.results.compare): one record, so the two give the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from softeval import methods
from softeval.analysis.compare import Comparison, compare_runs, load_runs
from softeval.analysis.lmeval_groups import GroupScore, group_scores
from softeval.analysis.pairs import PairedRow, paired_method_tests
from softeval.analysis.post_scores import PostScores, read_post_scores
from softeval.analysis.spread import Spread, SpreadTest, spread_tests, spreads
from softeval.errors import UserError
from softeval.methods import TREATMENT, label_of, with_role
from softeval.metrics import METRIC
from softeval.store.format import Run
from softeval.store.lmeval_groups import read_groups


@dataclass
class CompareRecord:
    """An output root compared: ``paired`` (each treatment against prompting, per task and model), ``groups`` (lm-eval
    groups' scores), ``comparison`` (the ranking with BASE=POST pairs, else None), ``skipped`` (each folder left out,
    with why) and ``runs`` (the finished runs read)."""

    paired: list[PairedRow]
    groups: list[GroupScore]
    comparison: Comparison | None
    skipped: list[tuple[Path, str]]
    runs: list[Run]
    spreads: list[Spread] = field(default_factory=list)  # each method across prompt variants (analysis/spread.py)
    spread_tests: list[SpreadTest] = field(default_factory=list)  # the treatment's spread against the others'

    def to_json(self) -> dict[str, Any]:
        """What `softeval compare --json` prints: the ranking's keys (with pairs), then ``paired_tests``,
        ``lm_eval_groups`` and ``skipped_folders`` ({path, reason})."""
        data = self.comparison.to_json() if self.comparison else {}
        data["paired_tests"] = [row.to_json() for row in self.paired]
        data["lm_eval_groups"] = [row.to_json() for row in self.groups]
        data["skipped_folders"] = [{"path": str(p), "reason": why} for p, why in self.skipped]
        data["spread"] = [s.row() for s in self.spreads]
        data["spread_tests"] = [t.row() for t in self.spread_tests]
        return data

    @property
    def empty(self) -> bool:
        """Nothing compared: no paired test, no group, no ranking."""
        return not self.paired and not self.groups and self.comparison is None and not self.spreads


def nothing_to_compare() -> UserError:
    """The refusal where a record is ``empty``: what a comparison needs."""
    treated = " or ".join(label_of(m) for m in with_role(TREATMENT))
    against = " or ".join(label_of(m) for m in methods.compared())
    return UserError(f"nothing to compare: no model has a {treated} run beside a {against} run "
                     "on the same task, and no --pair BASE=POST was given for the ranking")


def post_side(post_scores: str | Path | PostScores | None, pairs: Sequence[tuple[str, str]]) -> PostScores | None:
    """The --post-scores file, read and checked before any run is (a PostScores is taken as read); None without
    one. A file without pairs is refused: it is the post-trained side of a ranking."""
    if post_scores is None:
        return None
    if not pairs:
        named = post_scores.path if isinstance(post_scores, PostScores) else post_scores
        raise UserError(f"--post-scores {named} is the post-trained side of a ranking: give --pair BASE=POST for "
                        "each base model (at least 3), POST as the file names it")
    return post_scores if isinstance(post_scores, PostScores) else read_post_scores(post_scores)


def paired_metric(metric: str) -> str:
    """The metric the paired tests use: ``metric`` where it is per item, else accuracy (a ratio such as
    knowledge_accuracy has no outcome on every item)."""
    return metric if metric not in METRIC or METRIC[metric].among is None else "accuracy"


def compare_record(root: Path, pairs: Sequence[tuple[str, str]] = (), metric: str = "accuracy",
                   post_method: str | None = None, n_boot: int = 2000,
                   post_scores: str | Path | PostScores | None = None) -> CompareRecord:
    """The record of ``root``'s runs (read by store.format.scan: every finished, valid run; the others in
    ``skipped``). ``pairs``: BASE=POST model pairs for the ranking (none: no ranking); ``post_method``: how the
    post-trained side is scored (None: the reference method); ``post_scores``: that side from a file instead."""
    pairs = list(pairs)
    filed = post_side(post_scores, pairs)
    runs, skipped = load_runs(Path(root))
    paired = paired_method_tests(runs, paired_metric(metric))
    comparison = compare_runs(runs, pairs, metric, post_method, n_boot, post_scores=filed) if pairs else None
    groups = group_scores([r.results for r in runs], read_groups(Path(root)))
    return CompareRecord(paired, groups, comparison, skipped, runs, spreads(runs), spread_tests(runs))
