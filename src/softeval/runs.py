"""Run folders: one per (model, task, method, seed), written atomically, never overwritten silently.

A run is written into ``seed<k>.partial/`` and renamed to ``seed<k>/`` in one step when it is
complete (see docs/run-format.md). An interrupted run leaves its partial folder (with the tuning
checkpoint) for the next invocation to resume.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from softeval.errors import UserError
from softeval.locking import Locked, file_lock

RunLocked = Locked  # what a second process on a run that is being written gets (a UserError: exit 2)

# The run's identity is every option it was run with (results.json "config") except these, which
# provably cannot change a number in its files; anything else, including options added later, is
# part of it. Kept in: device and dtype (kernels and precision differ), eval_batch_size (batch
# composition changes padding and matmul shapes, which can flip a greedy near-tie), curve_every and
# curve_items (the curve, the tuning pool and the shots), kind (the chat template).
NOT_IDENTITY = (
    "out",    # where the folders go; moving a runs folder keeps its runs
    "force",  # whether to replace a finished run: decides what happens, not what is computed
    "wait",   # whether to wait for another process writing the run
)
NOT_RECORDED = "not recorded"


def identity_of(options: dict) -> dict:
    """The part of a run's options that defines it (see NOT_IDENTITY)."""
    return {k: v for k, v in options.items() if k not in NOT_IDENTITY}


def identity_diff(old: dict, new: dict) -> list[str]:
    """'key: old -> new' for each identity option that differs; an option a run did not record (it
    was written before the option existed) counts as different: its effect then is unknown."""
    old, new = identity_of(old), identity_of(new)

    def show(options: dict, key: str) -> str:
        return repr(options[key]) if key in options else NOT_RECORDED

    keys = list(new) + [k for k in old if k not in new]
    return [f"{k}: {show(old, k)} -> {show(new, k)}" for k in keys
            if k not in old or k not in new or old[k] != new[k]]


_FILE_SUFFIXES = (".yaml", ".yml", ".json", ".gguf")


def folder_name(name: str) -> str:
    """The folder a model or task name is written to: the one rule for the run writer and every reader.

    A pure function of the name (it never looks at the disk), so every process in any working
    directory, and the index checking a folder against its results.json, maps a name to the same
    folder. A file path (a task file .yaml/.yml/.json, a .gguf model, or a name starting with '/',
    './', '../' or '~') gives its last part; any other name (preset, task, hub id ``org/name``) has
    each run of characters outside ``[A-Za-z0-9._-]`` turned into ``--``.
    """
    text = name.strip().rstrip("/")
    if text.lower().endswith(_FILE_SUFFIXES) or text.startswith(("/", "./", "../", "~")):
        text = text.rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9._-]+", "--", text).strip("-") or "unnamed"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class RunFolder:
    out: Path
    final: Path

    @classmethod
    def at(cls, out: str | Path, model: str, task: str, method: str, seed: int) -> RunFolder:
        out = Path(out)
        return cls(out, out / folder_name(model) / folder_name(task) / method / f"seed{seed}")

    @property
    def partial(self) -> Path:
        return self.final.with_name(self.final.name + ".partial")

    @property
    def lock_path(self) -> Path:
        """Beside the run folders (hidden, so no scan takes it for a run); removed on release."""
        return self.final.with_name(f".{self.final.name}.lock")

    def lock(self, wait: bool = False, on_wait=None, on_stale=None):
        """Context manager: be the one process writing this run (checking, resuming, finishing it).

        Held by another live process: raise ``locking.Locked`` (a UserError: exit 2) naming its pid,
        host and start time, or with ``wait`` block until it is free (``on_wait(holder)`` is called
        once first). A lock left by a killed process is free (the OS drops it); ``on_stale(info)``
        is told about the dead holder's left-over details. Take it before ``check`` and keep it
        until ``finish`` has returned.
        """
        return file_lock(self.lock_path, f"run {self.final}", wait=wait, on_wait=on_wait, on_stale=on_stale)

    def finished_results(self) -> dict | None:
        path = self.final / "results.json"
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            return None

    def check(self, config: dict, force: bool) -> bool:
        """True when this run is already finished with the same config (skip it). A finished run
        with another config is an error unless ``force`` (then it is removed)."""
        done = self.finished_results()
        if done is None:
            if self.final.exists() and not force:
                raise UserError(f"{self.final} exists but holds no valid results.json: remove it or pass --force")
            if self.final.exists():
                shutil.rmtree(self.final)
            return False
        if force:
            shutil.rmtree(self.final)
            return False
        recorded = done.get("config")
        diff = identity_diff(recorded if isinstance(recorded, dict) else {}, config)
        if diff:
            raise UserError(f"a finished run with other settings is at {self.final} ({'; '.join(diff)}). "
                            "Pass --force to replace it, or --out to write elsewhere.")
        return True

    def start(self, config: dict | None = None) -> Path:
        """The partial folder to write into. A partial folder left by an interrupted run with the same
        settings is kept (its tuning checkpoint resumes); one with other settings is started afresh."""
        marker = self.partial / "config.json"
        if config is not None and marker.is_file():
            try:
                old = json.loads(marker.read_text())
            except json.JSONDecodeError:
                old = {}
            if not isinstance(old, dict) or identity_diff(old, config):
                shutil.rmtree(self.partial)
        self.partial.mkdir(parents=True, exist_ok=True)
        if config is not None:
            write_json(marker, config)
        return self.partial

    def finish(self, results: dict, samples: list[dict], curve: list[dict] | None = None) -> Path:
        """Write the files into the partial folder, then rename it into place in one step."""
        folder = self.start()
        write_jsonl(folder / "samples.jsonl", samples)
        if curve is not None:
            write_jsonl(folder / "curve.jsonl", curve)
        for scratch in [*folder.glob("tune_state*"), folder / "outputs.jsonl"]:  # resume state, superseded
            scratch.unlink(missing_ok=True)
        write_json(folder / "results.json", results)
        if self.final.exists():  # never rename onto a folder (os.replace would merge into an empty one)
            raise UserError(f"{self.final} appeared while this run was being written; its files are kept in "
                            f"{folder}. Is another softeval writing to {self.out} without the run lock?")
        os.replace(folder, self.final)
        try:
            from softeval import index
        except ImportError:
            return self.final
        try:
            index.record_run(self.out, self.final)
        except Exception as err:  # the run folder is the truth; a stale index can be rebuilt
            import sys

            print(f"warning: could not add {self.final} to the runs index ({err}); "
                  f"run `softeval runs {self.out} --rebuild`", file=sys.stderr)
        return self.final


def write_json(path: Path, data) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as handle:
        for row in rows:
            handle.write(json.dumps(row, default=str) + "\n")
    os.replace(tmp, path)


def versions() -> dict:
    import torch
    import transformers

    from softeval import __version__

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "softeval": __version__}


def git_hash() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
