"""The Ray worker of a sweep: one process that loads a model once and runs that model's jobs.

Each job goes through ``pipeline.run_job``, the code ``softeval run`` runs, with the loaded model passed
in: same RunConfig, same run folder, same identity, same files. The worker knows nothing of scoring.
A worker that finishes one model may be handed the next model asking for the same resources (the
old model is dropped first), which saves a process start and the torch import.
"""

from __future__ import annotations

import gc
import os
import socket
import time
import traceback
import uuid
from pathlib import Path

from rich.console import Console

from softeval.errors import UserError
from softeval.lm.backends import close_engine
from softeval.lm.models import LoadedModel
from softeval.run import pipeline  # its functions looked up at call time: tests replace them
from softeval.store.locking import Locked, describe
from softeval.store.runs import OtherSettings


def probe_writable(out: str) -> str | None:
    """None when this process can create ``out`` and write a file in it, else why not (one line)."""
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
        probe = Path(out) / f".softeval-probe-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        return f"{type(err).__name__}: {err.strerror or err}"
    return None


FOREIGN_ERROR_CHARS = 500  # a foreign error's line in the sweep table (its traceback is in the job's log)


def error_line(err: BaseException) -> str:
    """An error as the sweep reports it: a user error's own message whole (it ends with the fix), else
    its type and last line, cut at ``FOREIGN_ERROR_CHARS`` (the traceback is in the job's log)."""
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    if isinstance(err, UserError):
        return " ".join(" ".join(lines).split())
    text = f"{type(err).__name__}: {lines[-1] if lines else ''}"
    return text if len(text) <= FOREIGN_ERROR_CHARS else text[:FOREIGN_ERROR_CHARS - 1] + "…"


class SweepWorker:
    """Wrapped by ``ray.remote`` in the driver with the model's cpus / gpus / memory."""

    def __init__(self) -> None:
        self.lm: LoadedModel | None = None
        self.key: tuple | None = None
        self.load_failed: tuple | None = None  # (key, error) of the model that last failed to load

    def hello(self, out: str) -> dict:
        import ray  # lazy: ray is slow to import, and only a worker that Ray started calls this

        ctx = ray.get_runtime_context()
        return {"pid": os.getpid(), "node_id": ctx.get_node_id(), "node_ip": ray.util.get_node_ip_address(),
                "host": socket.gethostname(), "out_error": probe_writable(out)}

    def run(self, config, log_path: str, command: str = "sweep") -> dict:
        """Run one job (a RunConfig with one method and one seed); its log goes to ``log_path``.
        ``command`` (sweep or track) picks the fix an error suggests (runs.FIXES)."""
        started = time.time()
        method = config.methods[0]
        try:
            if pipeline.is_finished(config, method):  # finished since the driver looked: never run twice
                return {"skipped": True, "seconds": 0.0, "pid": os.getpid()}
        except OtherSettings as err:
            return {"error": error_line(err.said_by(command)), "seconds": 0.0, "pid": os.getpid()}
        # one loaded model (and, with a backend that keeps one, one engine) for all the jobs of a model
        key = (config.model, config.device, config.dtype, config.kind, config.backend,
               tuple(sorted((config.engine_args or {}).items())))
        loaded_in = None
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        if self.key != key:
            close_engine(self.lm)  # its processes and memory go before the next model loads
            self.lm, self.key = None, None
            gc.collect()
            if self.load_failed is not None and self.load_failed[0] == key:  # not loaded again for each job
                return {"error": self.load_failed[1], "seconds": 0.0, "pid": os.getpid()}
            try:
                self.lm = pipeline.load_lm(config)
            except Exception as err:
                with open(log_path, "a", encoding="utf-8") as log:
                    log.write(f"== loading {config.model} (pid {os.getpid()})\n{traceback.format_exc()}")
                self.load_failed = (key, f"the model did not load: {error_line(err)}")
                return {"error": self.load_failed[1], "seconds": round(time.time() - started, 2), "pid": os.getpid()}
            self.key = key
            loaded_in = round(time.time() - started, 2)
        with open(log_path, "a", encoding="utf-8") as log:
            console = Console(file=log, width=120, force_terminal=False, soft_wrap=True)  # a log line is one line
            console.print(f"== {config.model} / {config.task} / {method} / seed {config.seed} (pid {os.getpid()})")
            skipped: list[str] = []  # finished by another process while this job waited for its lock
            try:
                results = pipeline.run_job(config, console=console, lm=self.lm, on_skip=skipped.append, command=command)
            except Locked as err:  # another process writes this run (without `wait: true`): its run, not a failure
                console.print(str(err), markup=False)
                return {"elsewhere": describe(err.holder), "seconds": round(time.time() - started, 2),
                        "pid": os.getpid()}
            except Exception as err:  # reported as a plain line: not every exception survives pickling
                log.write(traceback.format_exc())
                if isinstance(err, OtherSettings):
                    err = err.said_by(command)
                return {"error": error_line(err), "seconds": round(time.time() - started, 2), "pid": os.getpid()}
        result = results[0]
        return {"skipped": bool(skipped), "seconds": round(time.time() - started, 2), "load_seconds": loaded_in,
                "pid": os.getpid(), "accuracy": (result.get("metrics", {}).get("accuracy") or {}).get("value")}
