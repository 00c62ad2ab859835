"""lm-eval groups and tags (``lm-eval:mmlu``): what they hold, read from lm-eval's index without loading
any data, and their scores as lm-eval aggregates them.

A group runs as its subtasks, each a run of its own (tuned on its own tuning split, as ``--task
lm-eval:SUBTASK`` would be: the same run folder and identity); ``plan`` lists the subtasks and every
group on the way down with its ``aggregate_metric_list``. ``group_score`` is lm-eval's own aggregation
(``Group.aggregate`` in lm-eval 0.4.13: over the group's leaf tasks, ``aggregate_subtask_metrics``
size-weighted or not as the YAML says, the pooled or unweighted-mean stderr), over the per-task metrics
each subtask run records (``results.json`` → ``metrics.lm_eval``). A tag has no score of its own in
lm-eval, so neither has it here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from softeval.errors import UserError
from softeval.tasks.lmeval_bridge import PREFIX, find, kind_of, lm_eval_module, raw_config


@dataclass
class GroupPlan:
    """A group or tag as runs: ``tasks``, its leaf tasks in lm-eval's order (each once); ``groups``,
    every group in it (itself first, where it is one) -> {alias, tasks (its leaves), aggregate (lm-eval's
    aggregate_metric_list entries: metric, filter_list, weight_by_size)}."""

    name: str
    kind: str  # group or tag
    tasks: list[str] = field(default_factory=list)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def is_group(name: str, include_path: str | None) -> bool:
    """Is ``lm-eval:NAME`` a group or a tag of lm-eval's index (or the include path's)?"""
    return name.startswith(PREFIX) and kind_of(find(name[len(PREFIX):], include_path)[1]) in ("group", "tag")


def plan(task_name: str, include_path: str | None) -> GroupPlan:
    """The subtasks of group or tag ``lm-eval:NAME``, and its groups' aggregation (no data is read).
    Refused, one line each: a member that sets options of its own (``num_fewshot`` in a group's list:
    that subtask would not be the run ``--task lm-eval:SUBTASK`` is), an inline task."""
    name = task_name[len(PREFIX):]
    index, found = find(name, include_path)
    kind = kind_of(found)
    out = GroupPlan(name, kind)
    if kind == "tag":
        out.tasks = _tag_members(name, index)
        return out
    _walk(name, raw_config(found), index, out, name)
    out.groups = {name: out.groups[name], **out.groups}  # the group itself first, then its subgroups
    return out


def _tag_members(name: str, index) -> list[str]:
    return sorted(index.task_index[name].tags)


STRUCTURAL = frozenset({"group", "group_alias", "task", "aggregate_metric_list", "metadata"})  # what softeval reads


def _walk(name: str, cfg: dict[str, Any], index, out: GroupPlan, top: str) -> list[str]:
    """Add group ``name`` (its config ``cfg``) and its members to ``out``; its leaves."""
    from lm_eval.config.group import GroupConfig

    extra = sorted(k for k in cfg if k not in STRUCTURAL)
    if extra:
        raise UserError(f"lm-eval:{top}: group {name} sets {', '.join(extra)} for its tasks, which softeval does "
                        "not run as a group yet: run its subtasks one by one (`softeval tasks --lm-eval` lists them)")
    config = GroupConfig(**{k: v for k, v in cfg.items() if k in STRUCTURAL} | {"group": name})
    members = cfg.get("task") or []
    leaves: list[str] = []
    for member in members if isinstance(members, list) else [members]:
        leaves += _member_leaves(name, member, index, out, top)
    aggregate = [{"metric": a.metric, "filter_list": a.filter_list, "weight_by_size": bool(a.weight_by_size)}
                 for a in config.aggregate_metric_list or []
                 if isinstance(a.aggregation, str) and a.aggregation == "mean"]
    out.groups[name] = {"alias": config.group_alias or name, "tasks": list(dict.fromkeys(leaves)),
                        "aggregate": aggregate}
    for leaf in leaves:
        if leaf not in out.tasks:
            out.tasks.append(leaf)
    return leaves


def _member_leaves(name: str, member: Any, index, out: GroupPlan, top: str) -> list[str]:
    """The leaves of one member of group ``name``: a subgroup written in the group (walked, its own groups added
    to ``out``), a registered group, a tag's tasks or a task."""
    if isinstance(member, dict) and "group" in member and set(member) <= STRUCTURAL:
        child = str(member["group"])
        registered = index.task_index.get(child)
        if registered is not None and len(member) == 1:
            return _walk(child, raw_config(registered), index, out, top)
        return _walk(f"{name}::{child}", member, index, out, top)
    if not isinstance(member, str):
        raise UserError(f"lm-eval:{top}: group {name} lists {_said(member)} with options of its own, which "
                        "softeval does not run as a group yet: run its subtasks one by one")
    entry = index.task_index.get(member)
    if entry is None:
        raise UserError(f"lm-eval:{top}: group {name} lists {member}, which is in no lm-eval index here")
    kind = kind_of(entry)
    if kind == "group":
        return _walk(member, raw_config(entry), index, out, top)
    if kind == "tag":
        return _tag_members(member, index)
    return [member]


def _said(member: Any) -> str:
    return str(member.get("task", member)) if isinstance(member, dict) else repr(member)


def group_score(group: dict[str, Any], task_metrics: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """lm-eval's score of one group (a ``GroupPlan.groups`` value) from its leaves' metrics:
    ``task_metrics[leaf]`` = {"metric,filter": value, "metric_stderr,filter": stderr, "sample_len": n}
    (a subtask without a run is left out of ``task_metrics``). Returns {"metric,filter": value,
    "metric_stderr,filter": ..., "sample_len": n, "tasks": leaves scored, "missing": leaves without}."""
    lm_eval_module()
    from lm_eval.api.metrics import aggregate_subtask_metrics, pooled_sample_stderr, unweighted_mean_stderr

    leaves = group["tasks"]
    present = [t for t in leaves if t in task_metrics]
    out: dict[str, Any] = {"sample_len": sum(task_metrics[t].get("sample_len", 0) for t in present),
                           "tasks": len(present), "missing": [t for t in leaves if t not in task_metrics]}
    for agg in group["aggregate"]:
        metric = agg["metric"]
        filters = agg["filter_list"] or sorted({key.split(",", 1)[1] for t in present for key in task_metrics[t]
                                               if key.startswith(f"{metric},")})
        for name in filters:
            key, err_key = f"{metric},{name}", f"{metric}_stderr,{name}"
            having = [t for t in present if key in task_metrics[t]]
            if not having:
                continue
            values = [task_metrics[t][key] for t in having]
            sizes = [task_metrics[t].get("sample_len", 0) for t in having]
            out[key] = aggregate_subtask_metrics(values, sizes, agg["weight_by_size"])
            errors = [task_metrics[t].get(err_key) for t in having]
            if all(isinstance(e, float | int) for e in errors):
                out[err_key] = (pooled_sample_stderr(errors, sizes) if agg["weight_by_size"]
                                else unweighted_mean_stderr(errors))
            else:
                out[err_key] = "N/A"
    return out
