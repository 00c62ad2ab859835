"""`softeval sweep`: run a sweep file's models × tasks × methods × seeds on Ray core.

The driver decides what is finished before anything is scheduled (the run folders are the record, the
rule is ``softeval run``'s), so a finished sweep starts no worker and loads no model. Each model gets one
Ray actor (its cpus / gpus / memory), which loads the model once and runs the model's jobs one after
the other through ``pipeline.run_job`` (see sweep_worker.py). A worker process or node that dies has its
running job retried on a fresh worker, at most ``retries`` times; the retried run resumes from its
``.partial`` folder. A job that raises is reported and the rest go on. Nothing here knows how a run is
scored. Docs: docs/reference/sweeps.md.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from softeval.analysis.compare import MIN_PAIRS, compare_runs, load_runs
from softeval.consoles import message_console
from softeval.errors import UserError, shown
from softeval.run import pipeline
from softeval.run.config import SWEEP_FILE
from softeval.run.validate import check_out
from softeval.store.format import COMPARE_FILE, REPORT_FILE, SWEEP_FOLDER, folder_name
from softeval.store.lmeval_groups import record_group
from softeval.store.runs import OtherSettings
from softeval.sweep.file import ModelEntry, Sweep, SweepJob
from softeval.sweep.ray_token import use_token_if_any
from softeval.sweep.view import SweepView, print_notes
from softeval.sweep.worker import SweepWorker, error_line


@dataclass
class JobState:
    job: SweepJob
    folder: Path
    state: str = "queued"  # queued, running, done, skipped, elsewhere (another process writes it), failed
    node: str = ""
    started: float | None = None
    seconds: float | None = None
    retries: int = 0  # times its worker died under it
    error: str = ""


@dataclass
class Worker:
    actor: object
    resources: tuple
    model: str | None = None  # label of the model it serves
    info: dict = field(default_factory=dict)  # pid, node of the process once it answered
    ready: bool = False


@dataclass
class SweepResult:
    states: list[JobState]
    seconds: float
    compare_path: Path | None = None
    report_path: Path | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[JobState]:
        return [s for s in self.states if s.state == "failed"]


def plan(sweep: Sweep, here: bool = True) -> list[JobState]:
    """Every job with its run folder; finished ones are 'skipped'. A finished run with other settings is
    a UserError here, before any worker starts (as ``softeval run`` refuses it), and so is an output root the runs
    to do cannot be written under (``check_out``): a dry run refuses what the sweep would. ``here``: the workers
    run on this machine (no cluster address), so what they resolve on it (the tuning dtype) is compared."""
    states = []
    for job in sweep.jobs:
        config = job.resolved()  # None: a warm start whose previous checkpoint has no soft prompt yet
        if config is None:
            folder, done = pipeline.own_folder(job.config, job.method), False
        else:  # the identity once: it digests the task's and data files
            folder, identity = pipeline.found_run(config, job.method, here)
            try:
                done = folder.is_finished(identity)
            except OtherSettings as err:
                raise err.said_by(sweep.command) from None
        states.append(JobState(job, folder.final, "skipped" if done else "queued"))
    if any(s.state == "queued" for s in states):  # the dry run refuses what the sweep would (one check)
        check_out(str(sweep.out), SWEEP_FILE)  # without creating it: the workers' probe does, once the cluster fits
    return states


def run_sweep(sweep: Sweep, address: str | None = None, max_parallel: int | None = None,
              console: Console | None = None, on_event=None) -> SweepResult:
    """Run every unfinished job; ``on_event(kind, state, worker_info)`` is called on each change
    (library use and tests: 'running', 'done', 'failed', 'retry')."""
    console = console or message_console()
    started = time.time()
    states = plan(sweep, here=address is None)
    for record in sweep.groups:  # every refusal is behind: the lm-eval groups' records (store/lmeval_groups.py)
        record_group(sweep.out, record)
    view = SweepView(console, states, on_event)
    todo = [s for s in states if s.state == "queued"]
    if todo:  # plan has checked the output root
        existing = _children()  # what this process ran before Ray: not Ray's to end
        with _sigterm_as_given():
            ray, own = _connect(address)
            try:
                _check_cluster(ray, [m for m in sweep.models if any(s.job.model is m for s in todo)])
                print_notes(sweep)  # every check has passed
                with view:
                    _Scheduler(ray, sweep, states, view, max_parallel).run()
            finally:  # also on Ctrl-C or SIGTERM (a KeyboardInterrupt): no worker, raylet or helper is left behind
                if own:
                    _shutdown(ray, existing)
    else:
        console.print(f"all {len(states)} runs of {sweep.path} are finished: nothing to run, no model loaded")
    result = SweepResult(states, time.time() - started)
    _finish(sweep, result, ran=bool(todo), console=console)
    view.summary(result)
    return result


def _children() -> set[int]:
    import psutil  # Ray's own dependency

    return {c.pid for c in psutil.Process().children(recursive=True)}


def _shutdown(ray, existing: set[int], grace: float = 5.0) -> None:
    """Stop the Ray this process started, then end what is left of the children it has had since (Ray's workers
    and services, and the processes they started; not those in ``existing``): SIGTERM, and SIGKILL for those still
    alive after ``grace`` seconds. A sweep stopped by Ctrl-C or SIGTERM leaves no process behind."""
    import psutil

    children = [c for c in psutil.Process().children(recursive=True) if c.pid not in existing]
    try:
        ray.shutdown()
    finally:
        left = [c for c in children if c.is_running()] + [
            c for c in psutil.Process().children(recursive=True) if c.pid not in existing and c not in children]
        for c in left:
            with contextlib.suppress(psutil.Error):
                c.terminate()
        _, alive = psutil.wait_procs(left, timeout=grace)
        for c in alive:
            with contextlib.suppress(psutil.Error):
                c.kill()
        psutil.wait_procs(alive, timeout=grace)


@contextlib.contextmanager
def _sigterm_as_given():
    """While Ray runs, a SIGTERM stops the sweep as the handler there was before says (the command line's raises its
    KeyboardInterrupt, Terminated: exit 143), also where Ray's wait turns that into a plain KeyboardInterrupt (exit
    130 otherwise). Nothing changes where that handler is not Python's own or this is not the main thread."""
    before = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    if not callable(before):
        yield
        return
    got: list[int] = []

    def stop(signum, frame):
        got.append(signum)
        before(signum, frame)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except KeyboardInterrupt:
        if got:
            before(signal.SIGTERM, None)  # raises the handler's own interrupt
        raise
    finally:
        signal.signal(signal.SIGTERM, before)


@contextlib.contextmanager
def _own_sigterm():
    """``ray.init`` puts in a SIGTERM handler of its own (``sys.exit``), over the command line's (which raises a
    KeyboardInterrupt, so that a SIGTERM stops as Ctrl-C does: softeval.cli.app). The handler there was before,
    where it is Python's own, is put back once Ray has started."""
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if callable(before):
            signal.signal(signal.SIGTERM, before)


def _connect(address: str | None):
    """Ray, and whether we started it (then we stop it). Already connected (library use): reused."""
    import ray  # lazy: slow to import, and a dry run or a finished sweep never starts it

    if address:
        check_reachable(address)
        use_token_if_any(address)
    if ray.is_initialized():
        return ray, False
    with _own_sigterm():
        try:
            if address:
                ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
                return ray, True
            src = str(Path(__file__).resolve().parents[2])  # workers import the softeval this driver runs (src/)
            env = {"PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)}
            ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False,
                     log_to_driver=False, logging_level=logging.ERROR, runtime_env={"env_vars": env})
        except (ConnectionError, RuntimeError, ValueError) as err:
            where = f"join the Ray cluster at {address}" if address else "start Ray on this machine"
            raise UserError(f"could not {where}: {str(err).strip().splitlines()[0] if str(err).strip() else err!r}") \
                from None
    return ray, True


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """A host:port (or ray://host:port) address must accept a connection: Ray itself would retry a
    wrong one for minutes. ``auto`` is left to Ray (it fails at once without a local cluster)."""
    if address == "auto":
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--address {shown(address)}: give auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as err:
        raise UserError(f"--address {address}: no Ray cluster answers there ({err.strerror or err}); "
                        "start one with `ray start --head`, or leave --address out to run on this machine") \
            from None


def gpus_of(model: ModelEntry, cluster_gpus: float) -> float:
    """A model's GPUs: as asked, or (not given) one when the cluster has any, else none."""
    if model.resources.gpus is not None:
        return model.resources.gpus
    return 1.0 if cluster_gpus > 0 else 0.0


def _check_cluster(ray, models: list[ModelEntry]) -> None:
    """Every model must fit on one live node: one asking for more would wait forever."""
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    total_gpus = sum(n.get("GPU", 0) for n in nodes)
    for m in models:
        need = {"GPU": gpus_of(m, total_gpus), "CPU": m.resources.cpus,
                "memory": (m.resources.memory_gb or 0) * 2**30}
        if not any(all(n.get(k, 0) >= v for k, v in need.items() if v) for n in nodes):
            most = {k: max((n.get(k, 0) for n in nodes), default=0) for k in need}
            words = {"GPU": "GPU(s)", "CPU": "CPU(s)", "memory": "GB of memory"}
            short = [f"{_amount(k, need[k])} {words[k]} (the largest node has {_amount(k, most[k])})"
                     for k in need if need[k] and most[k] < need[k]]
            raise UserError(f"model {m.label} asks for " + (", ".join(short) or m.resources.describe())
                            + " : no node of the Ray cluster can run it")


def _amount(key: str, value: float) -> str:
    return f"{value / 2**30:g}" if key == "memory" else f"{value:g}"


class _Scheduler:
    def __init__(self, ray, sweep: Sweep, states: list[JobState], view: SweepView, max_parallel: int | None):
        self.ray, self.sweep, self.view = ray, sweep, view
        self.cluster_gpus = sum(n["Resources"].get("GPU", 0) for n in ray.nodes() if n.get("Alive"))
        self.remote = ray.remote(SweepWorker)
        self.queues: dict[str, deque[JobState]] = {}
        for s in states:
            if s.state == "queued":
                self.queues.setdefault(s.job.model.queue, deque()).append(s)
        self.models = {m.queue: m for m in sweep.models}  # a series: one queue, its first checkpoint's resources
        self.waiting = deque(self.queues)  # models without a worker yet
        self.limit = max_parallel or len(self.queues)
        self.busy: dict[str, Worker] = {}  # model label -> its worker
        self.calls: dict = {}  # ObjectRef -> (worker, JobState or None for hello)
        self.any_job_started = False
        self.start_deaths: dict[str, int] = {}  # workers of a model that died before answering
        self.log_dir = sweep.out / SWEEP_FOLDER / "logs"

    def run(self) -> None:
        self._fill()
        while self.calls:
            ready, _ = self.ray.wait(list(self.calls), num_returns=1, timeout=1.0)
            self.view.refresh()
            for ref in ready:
                worker, state = self.calls.pop(ref)
                if state is None:
                    self._on_hello(ref, worker)
                else:
                    self._on_job(ref, worker, state)
            self._fill()

    def _resources(self, model: ModelEntry) -> tuple:
        return (model.resources.cpus, gpus_of(model, self.cluster_gpus), model.resources.memory_gb)

    def _fill(self, idle: Worker | None = None) -> None:
        """Give waiting models a worker: an idle one with the same resources, else a new actor. An idle
        worker also takes over the model of an actor still waiting for resources (that one is dropped):
        a process that has imported torch is worth keeping."""
        if idle is not None and not any(self._resources(self.models[m]) == idle.resources for m in self.waiting):
            pending = next((w for w in self.busy.values() if not w.ready and w.resources == idle.resources), None)
            if pending is not None:
                self._drop(pending)
                self.waiting.appendleft(pending.model)
        while self.waiting and len(self.busy) < self.limit:
            label = self.waiting.popleft()
            model = self.models[label]
            shape = self._resources(model)
            if idle is not None and idle.resources == shape:
                worker, idle = idle, None
            else:
                cpus, gpus, memory = shape
                options = {"num_cpus": cpus, "num_gpus": gpus, "max_restarts": 0, "max_task_retries": 0}
                if memory:
                    options["memory"] = int(memory * 2**30)
                worker = Worker(self.remote.options(**options).remote(), shape)
                self.calls[worker.actor.hello.remote(str(self.sweep.out))] = (worker, None)
            worker.model = label
            self.busy[label] = worker
            if worker.ready:
                self._next(worker)
        if idle is not None:
            self.ray.kill(idle.actor)

    def _drop(self, worker: Worker) -> None:
        """Kill a worker that has no job, forgetting its pending calls."""
        self.busy.pop(worker.model, None)
        for ref in [r for r, (w, _) in self.calls.items() if w is worker]:
            del self.calls[ref]
        self.ray.kill(worker.actor)

    def _on_hello(self, ref, worker: Worker) -> None:
        try:
            worker.info = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as err:
            self._worker_died(worker, None, err)
            return
        error = worker.info.get("out_error")
        if error:
            where = f"{self.sweep.out} from node {worker.info['node_ip']}"
            if not self.any_job_started:
                raise UserError(f"out folder {where} is not writable ({error}); on a cluster it must be a "
                                "folder every node sees and can write (see docs/reference/sweeps.md)")
            for state in self.queues.pop(worker.model, ()):
                self.view.failed(state, f"out folder not writable from this node: {error}")
            self._release(worker)
            return
        worker.ready = True
        self._next(worker)

    def _next(self, worker: Worker) -> None:
        queue = self.queues.get(worker.model)
        if not queue:
            self._release(worker)
            return
        state = queue.popleft()
        config = state.job.resolved()
        if config is None:  # a warm start whose previous checkpoint's soft-prompt run failed
            previous = state.job.warm_from.model
            self.view.failed(state, f"no soft prompt of {previous.label} to start from (its soft-prompt run failed)")
            self._next(worker)
            return
        self.any_job_started = True
        log = self.log_dir / f"{folder_name(state.job.model.queue)}.log"
        self.calls[worker.actor.run.remote(config, str(log), self.sweep.command)] = (worker, state)
        self.view.running(state, worker.info)

    def _on_job(self, ref, worker: Worker, state: JobState) -> None:
        try:
            answer = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as err:
            self._worker_died(worker, state, err)
            return
        except self.ray.exceptions.RayError as err:  # raised outside the job (the worker catches the job's own)
            self.view.failed(state, _error_line(err))
        else:
            if answer.get("error"):
                self.view.failed(state, answer["error"])
            elif answer.get("elsewhere"):
                self.view.elsewhere(state, answer["elsewhere"])
            else:
                self.view.done(state, answer)
        self._next(worker)

    def _worker_died(self, worker: Worker, state: JobState | None, err) -> None:
        """The process (or its node) is gone: retry its job on a fresh worker, a bounded number of times."""
        label = worker.model
        self.busy.pop(label, None)
        if state is None:
            self.start_deaths[label] = self.start_deaths.get(label, 0) + 1
            if self.start_deaths[label] > self.sweep.retries:
                for job in self.queues.pop(label, ()):
                    self.view.failed(job, f"its worker died {self.start_deaths[label]} times before starting "
                                          f"({_death(err)})")
        else:
            state.retries += 1
            if state.retries > self.sweep.retries:
                self.view.failed(state, f"its worker died {state.retries} times ({_death(err)})")
            else:
                self.queues.setdefault(label, deque()).appendleft(state)
                self.view.retry(state, worker.info, _death(err))
        if self.queues.get(label):
            self.waiting.appendleft(label)

    def _release(self, worker: Worker) -> None:
        self.busy.pop(worker.model, None)
        worker.model = None
        self._fill(idle=worker if worker.ready else None)
        if not worker.ready:
            self.ray.kill(worker.actor)


def _death(err: Exception) -> str:
    """Why Ray says a worker died, short: its message's first sentence or two."""
    text = " ".join(str(err).split())
    text = text.split(" Some common causes")[0]
    return f"{type(err).__name__}: {text[:220]}"


def _error_line(err: Exception) -> str:
    """A worker's error as the sweep table shows it (the cause a Ray error carries, when it has one)."""
    cause = getattr(err, "cause", None)
    return error_line(cause if isinstance(cause, Exception) else err)


def _finish(sweep: Sweep, result: SweepResult, ran: bool, console: Console) -> None:
    """compare.json (with >= 3 base/post-trained pairs) and report.html in out, each folder the report leaves out
    named in ``result.notes`` (as `softeval report` names it). A rerun that ran nothing leaves existing files
    untouched."""
    compare_path, report_path = sweep.out / COMPARE_FILE, sweep.out / REPORT_FILE
    pairs = sweep.pairs if len(sweep.pairs) >= MIN_PAIRS else None
    if not sweep.out.is_dir():
        return
    if pairs and (ran or not compare_path.exists()):
        try:
            comparison = compare_runs(load_runs(sweep.out)[0], pairs)
        except UserError as err:
            result.notes.append(f"no {COMPARE_FILE}: {err}")
            pairs = None
        else:
            compare_path.write_text(json.dumps(comparison.to_json(), indent=2))
    if pairs and compare_path.exists():
        result.compare_path = compare_path
    if ran or not report_path.exists():
        from softeval.analysis.report import build_report  # lazy: it imports matplotlib, slow to import

        build_report(sweep.out, report_path, pairs, on_skip=lambda path, why: result.notes.append(
            f"skipped {path}: {why} (left out of the report)"))
    result.report_path = report_path
