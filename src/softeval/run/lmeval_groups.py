"""``softeval run --task lm-eval:GROUP``: an lm-eval group or tag run as its subtasks, each a run of its
own (``--task lm-eval:SUBTASK`` with the same options: its own run folder, identity and soft prompt,
tuned on that subtask's tuning split), the model loaded once for all of them. Every subtask is checked
(its data read, its options against it) before the model loads. The group's definition is recorded in
the output root (store/lmeval_groups.py) for `compare` and `report`; its score is lm-eval's aggregation of the
subtasks' scores (tasks/lmeval_group.py).
"""

from __future__ import annotations

from dataclasses import replace

from rich.console import Console

from softeval.consoles import message_console
from softeval.lm.backends import close_engine
from softeval.lm.models import LoadedModel
from softeval.run.config import RunConfig
from softeval.run.pipeline import Job, load_lm, run_job
from softeval.store.lmeval_groups import record_group
from softeval.tasks.lmeval_bridge import PREFIX, lm_eval_module
from softeval.tasks.lmeval_group import GroupPlan, plan


def group_record(include_path: str | None, group: GroupPlan) -> dict:
    """What the output root keeps of a group run (store/lmeval_groups.py)."""
    return {**group.as_json(), "include_path": include_path, "lm_eval_version": lm_eval_module().__version__}


def run_group(config: RunConfig, console: Console | None = None,
              lm: LoadedModel | None = None) -> tuple[dict, list[list[dict]]]:
    """Run every subtask of the group ``config.task`` names; its record and each subtask's results (in
    the plan's order). ``lm``: an already loaded model (library use, tests), else ``config.model``'s."""
    console = console or message_console()
    group = plan(config.task, config.include_path)
    configs = [replace(config, task=PREFIX + name) for name in group.tasks]
    for sub in configs:  # every refusal before the model loads
        Job(sub, console, _lm=lm).prepare()
    record = group_record(config.include_path, group)
    record_group(config.out, record)
    console.print(f"lm-eval:{group.name} is an lm-eval {group.kind} of {len(configs)} tasks: each is a run of its "
                  "own", markup=False)
    own = lm is None
    lm = load_lm(config) if own else lm
    try:
        return record, [run_job(sub, console, lm=lm) for sub in configs]
    finally:
        if own:
            close_engine(lm)
