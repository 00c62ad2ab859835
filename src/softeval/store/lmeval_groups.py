"""The record of an lm-eval group run into an output root (``--task lm-eval:mmlu``): which subtasks it
holds and how lm-eval aggregates them (tasks/lmeval_group.py's ``GroupPlan``), so that `compare` and
`report` show the group's score from the subtasks' runs without lm-eval's index at hand.

One JSON file per group in ``<out>/.lm-eval-groups/`` (a dot folder: no run folder for a scan). It
describes the group as last run, not a result: the numbers are the subtask runs' own, each a run
folder with its identity. A group run again with another definition (a changed YAML) rewrites it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from softeval.store.runs import write_json

GROUPS_FOLDER = ".lm-eval-groups"


def group_file(out_root: Path, name: str) -> Path:
    return Path(out_root) / GROUPS_FOLDER / (re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".json")


def record_group(out_root: Path, record: dict[str, Any]) -> Path:
    """Write ``record`` ({group, kind, include_path, lm_eval_version, tasks, groups}) for its group."""
    path = group_file(out_root, record["name"])
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, record)
    return path


def read_groups(out_root: Path) -> list[dict[str, Any]]:
    """Every group record under ``out_root`` (an unreadable one is left out: a group score is a view,
    the runs stay readable without it)."""
    records = []
    for path in sorted((Path(out_root) / GROUPS_FOLDER).glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and isinstance(record.get("groups"), dict):
            records.append(record)
    return records
