"""A series: the checkpoints of one training run, in training order.

A series is a folder of checkpoints named by their step (``checkpoint-1000/``, ``step2000/``,
``step-2000/``, ``global_step300/``, ``iter_0001000/``, ``ckpt-5/``, or just ``1000/``), sorted by that
number, or an explicit list of (path, step). Every checkpoint is scored as a model of its own (same run
folders, same identity rules as ``softeval run``), with ``series`` and ``step`` recorded in results.json
and the index. The rules here are pure functions of names, so they are tested exhaustively
(tests/sweep/test_series.py) and shared by ``softeval sweep`` and ``softeval track``. Docs: docs/reference/sweeps.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from softeval.checks import is_whole
from softeval.errors import UserError, shown
from softeval.lm.models import MODEL_CONFIG

# The step is the number at the end of the name, after one of these words (or the whole name).
_STEP_NAME = re.compile(r"(?:.*?[-_.])?(?:checkpoint|ckpt|global[-_]?step|step|iter(?:ation)?)[-_]?(\d+)|(\d+)",
                        re.IGNORECASE)
MODEL_FILES = (MODEL_CONFIG,)  # what makes a folder a loadable checkpoint


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path


def step_of(name: str) -> int | None:
    """The training step a checkpoint's folder name gives, or None when it names none."""
    found = _STEP_NAME.fullmatch(name.strip())
    if not found:
        return None
    return int(found.group(1) or found.group(2))


def order(names: list[str]) -> list[tuple[int, str]]:
    """(step, name) of every name that gives a step, sorted by step. Two names giving the same step
    (``step100`` and ``checkpoint-100``) is a UserError naming both: which one is meant is unknowable."""
    found: dict[int, str] = {}
    for name in names:
        step = step_of(name)
        if step is None:
            continue
        if step in found:
            raise UserError(f"two checkpoints for step {step}: {found[step]} and {name}; "
                            "list the ones to score with a step each (see docs/reference/sweeps.md)")
        found[step] = name
    return sorted(found.items())


def discover(folder: str | Path) -> list[Checkpoint]:
    """The checkpoints in ``folder``: subfolders named by a step that hold a model (config.json), in
    step order. Nothing there is a UserError saying what the folder holds."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"series {folder}: no such folder (give the folder holding checkpoint-<step>/ folders)")
    names = [p.name for p in folder.iterdir() if p.is_dir() and any((p / f).is_file() for f in MODEL_FILES)]
    checkpoints = [Checkpoint(step, folder / name) for step, name in order(names)]
    if not checkpoints:
        some = sorted(p.name for p in folder.iterdir())[:5]
        raise UserError(f"series {folder}: no checkpoint folders (subfolders like checkpoint-1000/ or step2000/ "
                        f"with a config.json) in it; it holds {', '.join(some) or 'nothing'}")
    return checkpoints


def from_list(entries: list, where: str, base: Path | None = None) -> list[Checkpoint]:
    """An explicit series: each entry a mapping ``{path, step}`` (``step`` may be left out when the
    path's name gives it). Sorted by step; a step given twice is an error."""
    if not isinstance(entries, list) or not entries:
        raise UserError(f"{where}: 'checkpoints' must be a non-empty list of {{path, step}}")
    checkpoints: dict[int, Checkpoint] = {}
    for entry in entries:
        if isinstance(entry, str):
            entry = {"path": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) \
                or set(entry) - {"path", "step"}:
            raise UserError(f"{where}: each checkpoint must be a mapping with 'path' and 'step', not {shown(entry)}")
        path = Path(entry["path"])
        if base is not None and not path.is_absolute():
            path = base / path
        step = entry.get("step", step_of(path.name))
        if not is_whole(step) or step < 0:
            raise UserError(f"{where}: checkpoint {entry['path']}: 'step' must be a whole number >= 0 "
                            f"(its name gives none), not {shown(step)}")
        if step in checkpoints:
            raise UserError(f"{where}: two checkpoints for step {step}: {checkpoints[step].path} and {path}")
        checkpoints[step] = Checkpoint(step, path)
    return [checkpoints[s] for s in sorted(checkpoints)]
