"""Run folders: one per (model, task, method, seed), written atomically, never overwritten silently.

A run is written into ``seed<k>.partial/`` and renamed to ``seed<k>/`` in one step when it is
complete (see docs/reference/run-format.md). An interrupted run leaves its partial folder (with the tuning
checkpoint) for the next invocation to resume.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import shutil
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from softeval.errors import UserError
from softeval.store import index
from softeval.store.format import (
    CONFIG_FILE,
    CURVE_FILE,
    OUTPUTS_FILE,
    RESULTS_FILE,
    SAMPLES_FILE,
    SEED_FOLDER,
    TUNE_STATE,
    RunFormatError,
    damaged_folder,
    load_results,
    lock_file,
    model_folder,
    partial_folder,
    replaced_folder,
    seed_folder,
    task_folder,
    verify_run,
)
from softeval.store.identity import TUNE_DTYPE_RESOLVED, identity_diff
from softeval.store.locking import file_lock
from softeval.store.record import OtherFormat
from softeval.version import __version__


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)  # a full disk, a full quota


@dataclass
class RunFolder:
    out: Path
    final: Path
    replaces: bool = field(default=False, compare=False)  # set by check(force=True): finish replaces the old run

    @classmethod
    def at(cls, out: str | Path, model: str, task: str, method: str, seed: int,
           series: str | None = None, variant: int = 0) -> RunFolder:
        out = Path(out)
        return cls(out, out / model_folder(model, series) / task_folder(task, variant) / method / seed_folder(seed))

    @property
    def partial(self) -> Path:
        return partial_folder(self.final)

    def no_space(self, err: OSError) -> UserError | None:
        """A full disk (or quota) while this run was written, as one line: what could not be written, the
        space left and where; None for any other OSError. What was saved stays in ``partial``."""
        if err.errno not in NO_SPACE:
            return None
        what = err.filename or f"the run files in {self.partial}"
        where = next(p for p in (self.partial, *self.partial.parents) if p.exists())
        usage = shutil.disk_usage(where)
        return UserError(f"no space left on the device: could not write {what} ({_size(usage.free)} free of "
                         f"{_size(usage.total)} on the filesystem of {self.out}). Free some space there and "
                         f"run the same command again: it resumes from what {self.partial} holds")

    @property
    def lock_path(self) -> Path:
        """Beside the run folders (hidden, so no scan takes it for a run); removed on release."""
        return lock_file(self.final)

    def lock(self, wait: bool = False, on_wait=None, on_stale=None):
        """Context manager: be the one process writing this run (checking, resuming, finishing it).

        Held by another live process: raise ``locking.Locked`` (a UserError: exit 2) naming its pid,
        host and start time, or with ``wait`` block until it is free (``on_wait(holder)`` is called
        once first). A lock left by a killed process is free (the OS drops it); ``on_stale(info)``
        is told about the dead holder's left-over details. Take it before ``check`` and keep it
        until ``finish`` has returned.
        """
        return self._locked(file_lock(self.lock_path, f"run {self.final}", wait=wait, on_wait=on_wait,
                                      on_stale=on_stale))

    @contextmanager
    def _locked(self, lock):
        try:
            with lock as me:
                yield me
        finally:
            self._prune()

    def _prune(self) -> None:
        """Remove the method, task and model folders that the lock created when nothing else is in
        them: a command refused (or stopped) before it wrote anything leaves no empty folder that
        `softeval runs` would list as 'not a run folder'."""
        folder = self.final.parent
        while folder != self.out and self.out in folder.parents:
            try:
                folder.rmdir()
            except OSError:  # not empty (or gone): another run lives there
                return
            folder = folder.parent

    def finished(self) -> tuple[dict | None, str | None]:
        """(results, None) for a finished intact run, (None, why) for a damaged one (results.json
        unreadable, samples.jsonl not the file it was written with), (None, None) for none. A finished
        run of another format version (or of none) is OtherSettings: never read as this one."""
        if not self.final.exists():
            return None, None
        try:
            results = load_results(self.final)
            verify_run(self.final, results)
        except OtherFormat as err:
            wrote = [f"written by {err.use}"] if err.use else []
            raise OtherSettings(self.final, [err.about(RESULTS_FILE), *wrote],
                                what=IN_ANOTHER_FORMAT) from None
        except RunFormatError as err:
            return None, str(err)
        return results, None

    def finished_results(self) -> dict | None:
        return self.finished()[0]

    def check(self, config: dict, force: bool, log=None) -> bool:
        """True when this run is already finished with the same identity (skip it). A finished run with
        another identity is an error unless ``force`` (then ``finish`` replaces it, once the new run is
        complete). A damaged finished run is unfinished: it is moved aside (``.seed<N>.damaged-<time>``,
        kept) and ``log`` says so. One in another format version is as one with other settings (replaced
        with ``force``)."""
        try:
            done, damage = self.finished()
        except OtherSettings:
            if not force:
                raise
            done, damage = {}, None  # finished, unread: replaced below as any finished run is with force
        if done is None:
            if damage and not force:
                aside = damaged_folder(self.final, f"{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}")
                os.replace(self.final, aside)
                (log or _stderr)(f"{self.final}: {damage}; moved it to {aside}, scoring it again")
            elif self.final.exists():
                shutil.rmtree(self.final)
            return False
        if force:  # replaced by finish, once the new run is complete: a refused or killed --force keeps it
            self.replaces = True
            return False
        self._refuse_other_settings(done, config)
        return True

    def is_finished(self, config: dict) -> bool:
        """``check`` without touching anything (no lock needed: a sweep's driver and workers ask it
        while another process may be writing the run): True for a finished intact run with this
        identity, False for none or a damaged one (``check``, under the lock, moves that aside); a
        finished run with other settings is the same UserError as ``check`` raises."""
        done, _ = self.finished()
        if done is None:
            return False
        self._refuse_other_settings(done, config)
        return True

    def still_finished(self, config: dict) -> bool:
        """``is_finished`` for a run found a moment ago (another seed's): replaced since by a run of other settings,
        it is False rather than an error (it is not this run)."""
        try:
            return self.is_finished(config)
        except OtherSettings:
            return False

    def _refuse_other_settings(self, done: dict, config: dict) -> None:
        diff = _settings_diff(done, config)
        if diff:
            raise OtherSettings(self.final, diff)

    def at_another_seed(self, config: dict) -> RunFolder | None:
        """A finished intact run of another seed beside this one (``seed<N>`` folders, lowest seed first) whose
        identity is ``config``'s: for a method that reads no seed (a zero-shot run) it is this run, already done.
        None when there is none. Reads only: a damaged run or one of another format is passed over."""
        found = []
        for path in self.final.parent.glob("seed*"):
            match = SEED_FOLDER.match(path.name)
            if match and path != self.final:
                found.append((int(match[1]), path))
        for _, path in sorted(found):
            other = RunFolder(self.out, path)
            try:
                done, _ = other.finished()
            except OtherSettings:
                continue
            if done is not None and not _settings_diff(done, config):
                return other
        return None

    def start(self, config: dict | None = None, log=None) -> Path:
        """The partial folder to write into. A partial folder left by an interrupted run with the same
        settings is kept (its tuning checkpoint resumes); one with other settings is started afresh,
        and ``log`` is told what is dropped and why."""
        marker = self.partial / CONFIG_FILE
        if config is not None and marker.is_file():
            try:
                old = json.loads(marker.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError):
                old = None  # damaged: said as such, not as every option "not recorded"
            diff = identity_diff(old, config) if isinstance(old, dict) else ["its config.json is damaged"]
            if diff:
                (log or _stderr)(f"an interrupted run with other settings was at {self.partial} ({'; '.join(diff)}): "
                                 "its saved work is dropped, this run starts afresh")
                shutil.rmtree(self.partial)
        self.partial.mkdir(parents=True, exist_ok=True)
        if config is not None:
            write_json(marker, config)
        return self.partial

    def finish(self, results: dict, samples_text: str, curve: list[dict] | None = None) -> Path:
        """Write the files into the partial folder, then rename it into place in one step.
        ``samples_text``: samples.jsonl (``jsonl_text``), whose digest ``results`` carries."""
        folder = self.start()
        write_text(folder / SAMPLES_FILE, samples_text)
        if curve is not None:
            write_jsonl(folder / CURVE_FILE, curve)
        for scratch in [*folder.glob(f"{TUNE_STATE}*"), folder / OUTPUTS_FILE]:  # resume state, superseded
            scratch.unlink(missing_ok=True)
        write_json(folder / RESULTS_FILE, results)
        old = None
        if self.final.exists():  # never rename onto a folder (os.replace would merge into an empty one)
            if not self.replaces:
                raise UserError(f"{self.final} appeared while this run was being written; its files are kept in "
                                f"{folder}. Is another softeval writing to {self.out} without the run lock?")
            old = replaced_folder(self.final, os.getpid())
            os.replace(self.final, old)
        os.replace(folder, self.final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        self.index()
        return self.final

    def index(self) -> None:
        """Add the finished run to the runs index (an idempotent upsert). The folder is the truth:
        when the index cannot take it, say which command rebuilds the index, and carry on."""
        try:
            index.record_run(self.out, self.final)
        except index.IndexDamaged as err:
            _stderr(f"warning: could not add {self.final} to the runs index: {err}")
        except Exception as err:
            _stderr(f"warning: could not add {self.final} to the runs index ({err}); "
                    f"run `{index.rebuild_command(self.out)}`")


# What a user can do about a finished run with other settings, by the command that found it: only what
# that command has (`softeval sweep` and `track` have no --force).
FIXES = {
    "run": "Pass --force to replace it, or --out to write elsewhere.",
    "sweep": "Set another 'out' in the sweep file to write elsewhere (for a series, another 'name' also "
             "does), or remove that run folder to run it again.",
    "track": "Pass --out to write elsewhere or --name to track it as another series, or remove that run "
             "folder to run it again.",
}

IN_ANOTHER_FORMAT = "a finished run in another format"  # OtherSettings' ``what`` for one (store.record)

# How each command's user runs a finished (skipped) run again, for its "skipped" line.
REDO = {"run": "--force to redo", "sweep": "remove its folder to redo", "track": "remove its folder to redo"}


class OtherSettings(UserError):
    """A finished run with another identity where a run would go (``what``: or in another format, which
    is never read as this one); the one message for it, with the fix of the command in use (FIXES:
    ``softeval run``, ``tune`` and ``eval`` by default)."""

    def __init__(self, final: Path, diff: list[str], command: str = "run",
                 what: str = "a finished run with other settings"):
        self.final, self.diff, self.command, self.what = final, diff, command, what
        super().__init__(f"{what} is at {final} ({'; '.join(diff)}). {FIXES[command]}")

    def said_by(self, command: str) -> OtherSettings:
        """The same refusal, with the fix of ``command`` (a key of FIXES)."""
        return OtherSettings(self.final, self.diff, command, self.what)


def _settings_diff(done: dict, config: dict) -> list[str]:
    """How the identity of a finished run's results (``done``) differs from ``config`` (identity_diff)."""
    recorded, tuning = done.get("config"), done.get("tuning")
    recorded = dict(recorded) if isinstance(recorded, dict) else {}
    if isinstance(tuning, dict) and "tune_dtype_ran" in tuning:  # recorded before the key: what it ran
        recorded.setdefault(TUNE_DTYPE_RESOLVED, tuning["tune_dtype_ran"])
    return identity_diff(recorded, config)


def _size(n: int) -> str:
    """Bytes as a person reads them: 8.0 KB, 3.0 MB, 1.2 GB."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def write_text(path: Path, text: str) -> None:
    """Write through a temporary file and a rename: a reader sees the old file or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(path: Path, data) -> None:
    write_text(path, json.dumps(data, indent=2, default=str))


def jsonl_text(rows: list[dict]) -> str:
    return "".join(json.dumps(row, default=str) + "\n" for row in rows)


def write_jsonl(path: Path, rows: list[dict]) -> None:
    write_text(path, jsonl_text(rows))


def versions() -> dict:
    import torch  # lazy: slow to import, and only a finishing run asks for the versions
    import transformers  # lazy: as torch

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "softeval": __version__}


def git_hash() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
