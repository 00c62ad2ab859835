"""A series: the checkpoints of one training run, in training order.

A series is a folder of checkpoints named by their step (``checkpoint-1000/``, ``step2000/``,
``step-2000/``, ``global_step300/``, ``iter_0001000/``, ``ckpt-5/``, or just ``1000/``), sorted by that
number, or an explicit list of (path, step). Every checkpoint is scored as a model of its own (same run
folders, same identity rules as ``softeval run``), with ``series`` and ``step`` recorded in results.json
and the index. The rules here are pure functions of names, so they are tested exhaustively
(tests/test_series.py) and shared by ``softeval sweep`` and ``softeval track``. Docs: docs/sweeps.md.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from softeval.errors import UserError
from softeval.lm.models import MODEL_CONFIG

# The step is the number at the end of the name, after one of these words (or the whole name).
_STEP_NAME = re.compile(r"(?:.*?[-_.])?(?:checkpoint|ckpt|global[-_]?step|step|iter(?:ation)?)[-_]?(\d+)|(\d+)",
                        re.IGNORECASE)
MODEL_FILES = (MODEL_CONFIG,)  # what makes a folder a loadable checkpoint
# The files of a checkpoint folder that loading its model reads (checkpoint_fingerprint): config, weights
# and their shard indexes, tokenizer. Matched against the names at the folder's top level, lower-cased.
LOADED_FILES = ("config.json", "generation_config.json",
                "*.safetensors", "*.bin", "*.pt", "*.gguf", "*.safetensors.index.json", "*.bin.index.json",
                "tokenizer*", "special_tokens_map.json", "added_tokens.json", "vocab*", "merges.txt", "*.model",
                "chat_template*")
# What a trainer leaves beside them, never read to load the model (and often deleted to save space).
TRAINER_FILES = ("optimizer*", "scheduler*", "rng_state*", "trainer_state.json", "training_args.bin")
WHOLE_BELOW = 2 * 2**20  # files up to this size are read whole; larger ones ...
SAMPLED = 2**20  # ... by their first and last this many bytes


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
                            "list the ones to score with a step each (see docs/sweeps.md)")
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
            raise UserError(f"{where}: each checkpoint must be a mapping with 'path' and 'step', not {entry!r}")
        path = Path(entry["path"])
        if base is not None and not path.is_absolute():
            path = base / path
        step = entry.get("step", step_of(path.name))
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise UserError(f"{where}: checkpoint {entry['path']}: 'step' must be a whole number >= 0 "
                            f"(its name gives none), not {step!r}")
        if step in checkpoints:
            raise UserError(f"{where}: two checkpoints for step {step}: {checkpoints[step].path} and {path}")
        checkpoints[step] = Checkpoint(step, path)
    return [checkpoints[s] for s in sorted(checkpoints)]


def fingerprint_files(folder: Path) -> list[Path]:
    """The files of a checkpoint folder that loading its model reads, sorted by name (LOADED_FILES,
    less TRAINER_FILES)."""
    def wanted(name: str) -> bool:
        name = name.lower()
        return any(fnmatch.fnmatchcase(name, p) for p in LOADED_FILES) \
            and not any(fnmatch.fnmatchcase(name, p) for p in TRAINER_FILES)

    return sorted((p for p in folder.iterdir() if p.is_file() and wanted(p.name)), key=lambda p: p.name)


def checkpoint_fingerprint(folder: str | Path) -> str | None:
    """A cheap sha256 of what a checkpoint is, not of where it lies: a series folder moved or renamed
    keeps its fingerprint, and a checkpoint of another training run saved under the same folder names
    (``output/checkpoint-500`` twice) gets another one. None when ``folder`` is not a folder.

    Over the files that loading the model reads (config, weights and shard indexes, tokenizer: see
    LOADED_FILES), in name order: each file's name, its size, and its bytes when it is at most 2 MiB,
    else its first and last MiB. Reading whole weights would take minutes for a 70B checkpoint each
    time a sweep checks what is finished; the sampled bytes still tell two training runs apart, since
    a weight file's first MiB (the safetensors header, then the first tensor's values) and last MiB
    are trained values, which differ between two training runs (another seed, data or number of steps). What the sample skips
    (an edit in the middle of a shard that keeps its size) is not seen: a checkpoint is not edited in
    place. Trainer leftovers (optimizer and scheduler states, RNG states, trainer_state.json,
    training_args.bin) are left out: nothing scored depends on them, and deleting the optimizer state
    of a finished training to save space must not make its checkpoints other models.

    The digest of a folder whose files have the same names, sizes and modification times as at the
    previous call in this process is not computed again (a sweep asks for every job).
    """
    folder = Path(folder)
    if not folder.is_dir():
        return None
    files = fingerprint_files(folder)
    stats = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return _fingerprint(folder.resolve(), stats)


@functools.lru_cache(maxsize=4096)
def _fingerprint(folder: Path, stats: tuple) -> str:
    digest = hashlib.sha256()
    for name, size, _ in stats:
        digest.update(f"{name}\0{size}\0".encode())
        with open(folder / name, "rb") as f:
            if size <= WHOLE_BELOW:
                digest.update(f.read())
            else:
                digest.update(f.read(SAMPLED))
                f.seek(size - SAMPLED)
                digest.update(f.read(SAMPLED))
    return digest.hexdigest()
