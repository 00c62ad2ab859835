"""lm-eval groups' scores from their subtasks' runs: for each group recorded in an output root
(store/lmeval_groups.py) and each model, method and seed that has runs of its subtasks, lm-eval's aggregation
of the subtasks' per-task scores (``metrics.lm_eval`` of each results.json; tasks/lmeval_group.py).
A group with some subtasks not yet run is scored over those run and says how many are missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from softeval.constants import SOURCE_METRICS
from softeval.methods import names
from softeval.tasks.lmeval_bridge import PREFIX
from softeval.tasks.lmeval_group import group_score


@dataclass
class GroupScore:
    """One group's score for one model, method and seed."""

    group: str
    alias: str
    model: str
    method: str
    seed: int
    scores: dict[str, Any]  # "metric,filter" -> value, "metric_stderr,filter" -> stderr or "N/A"
    tasks: int  # subtasks scored
    total: int  # subtasks the group has
    sample_len: int
    missing: list[str] = field(default_factory=list)

    def values(self) -> list[tuple[str, float, Any]]:
        """(metric key, value, stderr) of each aggregated metric."""
        out = []
        for key, value in self.scores.items():
            metric, _, pipe = key.partition(",")
            if not metric.endswith("_stderr"):
                out.append((key, value, self.scores.get(f"{metric}_stderr,{pipe}", "N/A")))
        return out

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "alias": self.alias, "model": self.model, "method": self.method,
                "seed": self.seed, "scores": self.scores, "tasks": self.tasks, "total": self.total,
                "sample_len": self.sample_len, "missing": self.missing}


def _model_key(results: dict[str, Any]) -> str:
    series = results.get("series")
    return f"{series}@{results.get('step')}" if series is not None else str(results["model"])


def group_scores(results: list[dict[str, Any]], records: list[dict[str, Any]]) -> list[GroupScore]:
    """Every recorded group's score per (model, method, seed) among ``results`` (results.json dicts)."""
    per_run: dict[tuple[str, str, int], dict[str, dict]] = {}
    for r in results:
        own = r.get("metrics", {}).get(SOURCE_METRICS)
        if not str(r.get("task", "")).startswith(PREFIX) or not isinstance(own, dict):
            continue
        task_metrics = {**own.get("metrics", {}), "sample_len": own.get("sample_len", r.get("n", 0))}
        per_run.setdefault((_model_key(r), r["method"], r["seed"]), {})[r["task"][len(PREFIX):]] = task_metrics
    rows = []
    order = {m: i for i, m in enumerate(names())}
    runs = sorted(per_run.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], len(order)), kv[0][2]))
    for record in records:
        for (model, method, seed), leaves in runs:
            if not set(leaves) & set(record.get("tasks", [])):
                continue
            for name, group in record["groups"].items():
                if not group.get("aggregate"):
                    continue
                score = group_score(group, {t: leaves[t] for t in group["tasks"] if t in leaves})
                if not score["tasks"]:
                    continue
                scores = {k: v for k, v in score.items() if "," in k}
                rows.append(GroupScore(name, group.get("alias", name), model, method, seed, scores, score["tasks"],
                                       len(group["tasks"]), score["sample_len"], score["missing"]))
    return rows
