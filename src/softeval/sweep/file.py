"""The sweep file: which models, tasks, methods and seeds to run, with which `softeval run` options.

A sweep file is YAML (read with ``yaml.safe_load``). Every key is checked: an unknown key is an error
naming the key and the file, so a typo never silently falls back to a default. Paths in the file
(``out``, local model folders, task files, data files given as ``source``) are relative to the
file's folder. The reference is docs/sweeps.md.

Options are layered: the file's top level, then the model entry, then the task entry (the most
specific wins). Each (model, task, method, seed) becomes one ``RunConfig``: the very config that
``softeval run`` would build for the same flags, so the run folder and its identity are the same.
"""

from __future__ import annotations

import difflib
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from softeval.checks import is_data_file, is_number
from softeval.errors import UserError
from softeval.run.pipeline import RunConfig
from softeval.protocol import METHODS
from softeval.store.format import SOFT_PROMPT_FOLDER

# `softeval run` options a sweep file may set (top level, per model or per task), with their types.
RUN_OPTIONS: dict[str, tuple[type, ...]] = {
    "limit": (int, type(None)), "steps": (int,), "shots": (int,), "tokens": (int,), "lr": (float, int),
    "init": (str,), "source": (str,), "chat_template": (str,), "batch_size": (int,),
    "eval_batch_size": (int,), "curve_every": (int,), "curve_items": (int,), "length_group": (int,),
    "early_stop": (bool,), "permutations": (int,),
    "device": (str,), "dtype": (str,), "skip_bad_rows": (bool,), "wait": (bool,),
}
LIST_KEYS = ("methods", "seeds")  # may also be narrowed per model or per task
TOP_KEYS = {"out", "models", "tasks", "retries", *LIST_KEYS, *RUN_OPTIONS}
MODEL_KEYS = {"name", "kind", "post_trained", "resources", *LIST_KEYS, *RUN_OPTIONS}
# A model entry that is a series of checkpoints (softeval.sweep.series): a folder, or an explicit list.
SERIES_KEYS = {"name", "series", "checkpoints", "warm_start", "warm_steps", "kind", "resources", *LIST_KEYS,
               *RUN_OPTIONS}
WARM_STARTS = ("previous", "none")
# A warm-started soft prompt tunes for a third of `steps` (rounded up) unless `warm_steps` says otherwise.
# Measured on the synthetic trained series (benchmarks/bench_warm_start.py, docs/sweeps.md "Series"):
# warm starts of 10 steps reached the held-out format and final loss of fresh 30-step starts at every
# checkpoint; 5 steps reached the format but not the loss.
WARM_STEPS_FRACTION = 3
TASK_KEYS = {"name", *LIST_KEYS, *RUN_OPTIONS}
RESOURCE_KEYS = {"gpus", "cpus", "memory_gb"}
DEFAULT_RETRIES = 2  # times a job is retried after its worker process or node died


@dataclass
class Resources:
    gpus: float | None = None  # None: 1 when the cluster has GPUs, else 0 (decided by the driver)
    cpus: float = 1
    memory_gb: float | None = None

    def describe(self) -> str:
        gpus = "auto" if self.gpus is None else f"{self.gpus:g}"
        memory = "" if self.memory_gb is None else f", memory {self.memory_gb:g} GB"
        return f"cpus {self.cpus:g}, gpus {gpus}{memory}"


@dataclass
class ModelEntry:
    name: str  # what load_model gets: preset, hub id, local folder (made absolute) or .gguf file
    label: str  # as written in the sweep file
    kind: str | None = None
    post_trained: str | None = None  # `name` of its post-trained partner in this sweep
    resources: Resources = field(default_factory=Resources)
    options: dict[str, Any] = field(default_factory=dict)
    series: str | None = None  # a checkpoint of this series ...
    step: int | None = None  # ... at this step
    warm_start: bool = False  # its soft prompts start from the previous checkpoint's (not for the first)
    warm_steps: int | None = None  # tuning steps of a warm-started soft prompt (None: a third of `steps`)

    @property
    def queue(self) -> str:
        """The worker queue it is in: a series' checkpoints share one, run in step order by one worker
        (each warm start needs the previous checkpoint's soft prompt)."""
        return f"series {self.series}" if self.series is not None else self.label


@dataclass
class TaskEntry:
    name: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class SweepJob:
    model: ModelEntry
    config: RunConfig  # one method, one seed
    index: int = 0
    warm_from: SweepJob | None = None  # the previous checkpoint's soft-prompt job (same series, task, seed)

    def resolved(self) -> RunConfig | None:
        """The config to run: a warm-started job's ``init`` is ``from:`` the soft prompt its
        ``warm_from`` job wrote; None while that soft prompt does not exist (not run yet, or failed)."""
        if self.warm_from is None:
            return self.config
        from softeval.run.pipeline import run_folder
        from softeval.lm.softprompt import ADAPTER_WEIGHTS

        source = run_folder(self.warm_from.config, "soft-prompt")[0].final / SOFT_PROMPT_FOLDER
        if not (source / ADAPTER_WEIGHTS).is_file():
            return None
        return replace(self.config, init=f"from:{source}")

    @property
    def method(self) -> str:
        return self.config.methods[0]

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.model.label, self.config.task, self.method, self.config.seed)


@dataclass
class Sweep:
    path: Path
    out: Path
    models: list[ModelEntry]
    tasks: list[TaskEntry]
    jobs: list[SweepJob]
    retries: int = DEFAULT_RETRIES
    command: str = "sweep"  # the command that runs it, for the fixes its errors suggest (runs.FIXES)

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return [(m.name, m.post_trained) for m in self.models if m.post_trained]


def load_sweep(path: str | Path) -> Sweep:
    """Read and check a sweep file; every mistake is one UserError naming the file."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"sweep file not found: {path}")
    if not path.is_file():
        raise UserError(f"sweep file {path} is not a file")
    try:
        spec = yaml.load(path.read_text(encoding="utf-8"), Loader=_StrictLoader)  # safe_load, no repeated keys
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise UserError(f"sweep file {path}: not valid YAML ({' '.join(str(err).split())})") from None
    return parse_sweep(spec, path)


class _StrictLoader(yaml.SafeLoader):
    """yaml.safe_load, except that a key given twice in one mapping is an error (YAML keeps the last one
    silently, so `steps: 80` further down would quietly win). Merge keys (``<<: *shared``) work as in
    yaml.safe_load: a key written in the mapping overrides the merged one."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # merged in (and checked) by the base class
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key '{key}' is given twice (line {key_node.start_mark.line + 1})",
                    key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def parse_sweep(spec: Any, path: Path, where: str | None = None, command: str = "sweep") -> Sweep:
    """``path``: the file (relative paths in it are relative to its folder); ``where``: how errors
    name it (default: 'sweep file PATH'); ``command``: ``sweep`` or ``track`` (Sweep.command)."""
    where = where or f"sweep file {path}"
    if not isinstance(spec, dict):
        raise UserError(f"{where}: expected a mapping with models, tasks and out")
    _check_keys(spec, TOP_KEYS, where)
    for key in ("models", "tasks", "out"):
        if key not in spec:
            raise UserError(f"{where}: '{key}' is missing")
    here = path.parent
    if not isinstance(spec["out"], str) or not spec["out"].strip():
        raise UserError(f"{where}: 'out' must name a folder")
    out = _resolve(here, spec["out"])
    shared = _options(spec, where, here)
    retries = spec.get("retries", DEFAULT_RETRIES)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise UserError(f"{where}: 'retries' must be a whole number >= 0, not {retries!r}")
    models, series_names = [], []
    for entry in _list(spec["models"], "models", where):
        if isinstance(entry, dict) and ("series" in entry or "checkpoints" in entry):
            checkpoints = _series(entry, where, here)
            if checkpoints[0].series in series_names:
                raise UserError(f"{where}: two series are named {checkpoints[0].series!r}: give each a distinct 'name'")
            series_names.append(checkpoints[0].series)
            models += checkpoints
        else:
            models.append(_model(entry, where, here))
    tasks = [_task(t, where, here) for t in _list(spec["tasks"], "tasks", where)]
    _check_models(models, where)
    if len({t.name for t in tasks}) != len(tasks):
        raise UserError(f"{where}: a task is listed twice")
    jobs: list[SweepJob] = []
    previous: dict[tuple, SweepJob] = {}  # (series, task, seed) -> the last checkpoint's soft-prompt job
    for model in models:
        for task in tasks:
            options = {"methods": list(METHODS), "seeds": [0], **shared, **model.options, **task.options}
            methods, seeds = options.pop("methods"), options.pop("seeds")
            for seed in seeds:
                for method in methods:
                    config = RunConfig(model=model.name, task=task.name, methods=(method,), seed=seed,
                                       out=str(out), kind=model.kind, series=model.series, step=model.step,
                                       **options)
                    _check_config(config, f"{where}, model {model.label}, task {task.name}")
                    job = SweepJob(model, config, len(jobs))
                    if method == "soft-prompt" and model.series is not None:
                        key = (model.series, task.name, seed)
                        if model.warm_start and key in previous:
                            job.warm_from = previous[key]
                            steps = model.warm_steps or -(-config.steps // WARM_STEPS_FRACTION)
                            job.config = replace(config, steps=steps)
                        previous[key] = job
                    jobs.append(job)
    _one_writer_per_folder(jobs, where)
    return Sweep(path, out, models, tasks, jobs, retries, command)


def _one_writer_per_folder(jobs: list[SweepJob], where: str) -> None:
    """Every job writes its own run folder: two models whose folder names are alike (two local folders
    both called 'final', or one model listed under two spellings) would write the same runs."""
    from softeval.run.pipeline import run_folder

    seen: dict[Path, SweepJob] = {}
    for job in jobs:
        final = run_folder(job.config, job.method)[0].final
        if final in seen:
            other = seen[final].model
            raise UserError(f"{where}: models {other.label!r} and {job.model.label!r} would write the same run "
                            f"folders ({final.parent.parent.parent.name}/...): give one folder another name, "
                            "list the model once, or use two sweeps with different out folders")
        seen[final] = job


def _check_config(config: RunConfig, where: str) -> None:
    """The checks of `softeval run`, on the driver. The device is the worker's: only its name is checked
    here (the driver of a GPU cluster may have none)."""
    from softeval.checks import _DEVICE, check_config

    if not _DEVICE.fullmatch(config.device):
        raise UserError(f"{where}: unknown device {config.device!r}: use auto, cpu, cuda, cuda:N or mps")
    try:
        check_config(replace(config, device="auto", out="."))  # out: probed from the driver and each worker
    except UserError as err:
        raise UserError(f"{where}: {err}") from None


def _check_keys(entry: dict, allowed: set[str], where: str) -> None:
    for key in entry:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else f" (allowed: {', '.join(sorted(allowed))})"
            raise UserError(f"{where}: unknown key '{key}'{hint}")


def _list(value: Any, key: str, where: str) -> list:
    if not isinstance(value, list) or not value:
        raise UserError(f"{where}: '{key}' must be a non-empty list")
    return value


def _resolve(here: Path, text: str) -> Path:
    path = Path(os.path.expanduser(text))
    return Path(os.path.abspath(path if path.is_absolute() else here / path))


def _options(entry: dict, where: str, here: Path) -> dict[str, Any]:
    """The run options and the methods/seeds lists of one level of the file, type-checked."""
    options: dict[str, Any] = {}
    for key, types in RUN_OPTIONS.items():
        if key not in entry:
            continue
        value = entry[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise UserError(f"{where}: '{key}' must be {' or '.join(_type_name(t) for t in types)}, not {value!r}")
        options[key] = float(value) if key == "lr" else value
    source = options.get("source")
    if source is not None and is_data_file(source):
        options["source"] = str(_resolve(here, source))
    if "methods" in entry:
        methods = _list(entry["methods"], "methods", where)
        for method in methods:
            if method not in METHODS:
                raise UserError(f"{where}: unknown method {method!r}: use {', '.join(METHODS)}")
        if len(set(methods)) != len(methods):
            raise UserError(f"{where}: a method is listed twice in 'methods'")
        options["methods"] = list(methods)
    if "seeds" in entry:
        seeds = _list(entry["seeds"], "seeds", where)
        if any(isinstance(s, bool) or not isinstance(s, int) for s in seeds) or len(set(seeds)) != len(seeds):
            raise UserError(f"{where}: 'seeds' must be distinct whole numbers, not {seeds!r}")
        options["seeds"] = list(seeds)
    return options


def _type_name(t: type) -> str:
    return {int: "a whole number", float: "a number", str: "text", bool: "true or false",
            type(None): "null"}[t]


def _model(entry: Any, where: str, here: Path) -> ModelEntry:
    if isinstance(entry, str):
        entry = {"name": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"].strip():
        raise UserError(f"{where}: each model must be a name or a mapping with 'name', not {entry!r}")
    label = entry["name"]
    at = f"{where}, model {label}"
    _check_keys(entry, MODEL_KEYS, at)
    local = _resolve(here, label)
    name = str(local) if local.exists() else label  # a local folder or .gguf file relative to the file
    kind = entry.get("kind")
    if kind not in (None, "base", "post-trained"):
        raise UserError(f"{at}: kind must be base or post-trained, not {kind!r}")
    partner = entry.get("post_trained")
    if partner is not None and not isinstance(partner, str):
        raise UserError(f"{at}: post_trained must name another model of this sweep")
    resources = Resources()
    if "resources" in entry:
        given = entry["resources"]
        if not isinstance(given, dict):
            raise UserError(f"{at}: resources must be a mapping of gpus, cpus, memory_gb")
        _check_keys(given, RESOURCE_KEYS, f"{at}, resources")
        for key, value in given.items():
            if not is_number(value) or not 0 <= value < math.inf:
                raise UserError(f"{at}: resources.{key} must be a finite number >= 0, not {value!r}")
        resources = replace(resources, **{k: float(v) for k, v in given.items()})
        if resources.cpus == 0 and not (resources.gpus or 0) > 0:  # Ray: an actor reserving 0 CPUs is bounded by nothing else
            raise UserError(f"{at}: resources.cpus 0 reserves no CPU, so nothing bounds how many workers run at once: "
                            "give cpus > 0 (or gpus > 0, which then bounds them)")
        if resources.gpus is not None and resources.gpus > 1 and resources.gpus != int(resources.gpus):
            raise UserError(f"{at}: resources.gpus above 1 must be a whole number, not {resources.gpus:g}")
    return ModelEntry(name, label, kind, partner, resources, _options(entry, at, here))


def _series(entry: dict, where: str, here: Path) -> list[ModelEntry]:
    """A series entry: one ModelEntry per checkpoint, in step order, labelled ``<name>@<step>``."""
    from softeval.sweep.series import discover, from_list

    if "series" in entry and "checkpoints" in entry:
        raise UserError(f"{where}: a series entry gives 'series' (a folder) or 'checkpoints' (a list), not both")
    given = entry.get("series")
    if "series" in entry and (not isinstance(given, str) or not given.strip()):
        raise UserError(f"{where}: 'series' must name a folder of checkpoints, not {given!r}")
    if "name" in entry and (not isinstance(entry["name"], str) or not entry["name"].strip()):
        raise UserError(f"{where}: a series' 'name' must be text (quote it if it is a number), not {entry['name']!r}")
    name = entry.get("name", Path(given.rstrip("/")).name if given else None)
    if not isinstance(name, str) or not name.strip():
        raise UserError(f"{where}: a series given as 'checkpoints' needs a 'name'")
    at = f"{where}, series {name}"
    _check_keys(entry, SERIES_KEYS, at)
    checkpoints = discover(_resolve(here, given)) if given else from_list(entry["checkpoints"], at, here)
    warm = entry.get("warm_start", "previous")
    if warm not in WARM_STARTS:
        raise UserError(f"{at}: warm_start must be {' or '.join(WARM_STARTS)}, not {warm!r}")
    warm_steps = entry.get("warm_steps")
    if warm_steps is not None and (isinstance(warm_steps, bool) or not isinstance(warm_steps, int)
                                   or warm_steps < 1):
        raise UserError(f"{at}: warm_steps must be a whole number >= 1, not {warm_steps!r}")
    base = _model({k: v for k, v in entry.items() if k in MODEL_KEYS and k != "name"} | {"name": name}, where, here)
    return [replace(base, name=str(_resolve(here, str(c.path))), label=f"{name}@{c.step}", series=name, step=c.step,
                    warm_start=warm == "previous", warm_steps=warm_steps, options=dict(base.options))
            for c in checkpoints]


def _task(entry: Any, where: str, here: Path) -> TaskEntry:
    from softeval.tasks import get_task
    from softeval.tasks.custom import is_task_file

    if isinstance(entry, str):
        entry = {"name": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"].strip():
        raise UserError(f"{where}: each task must be a name or a mapping with 'name', not {entry!r}")
    at = f"{where}, task {entry['name']}"
    _check_keys(entry, TASK_KEYS, at)
    name = str(_resolve(here, entry["name"])) if is_task_file(entry["name"]) else entry["name"]
    try:
        get_task(name)
    except UserError as err:
        raise UserError(f"{where}: {err}") from None
    return TaskEntry(name, _options(entry, at, here))


def _check_models(models: list[ModelEntry], where: str) -> None:
    from softeval.lm.models import check_model_name

    labels = [m.label for m in models]
    if len(set(labels)) != len(labels):
        raise UserError(f"{where}: a model is listed twice")
    by_label = {m.label: m for m in models}
    partners = []
    for m in models:
        try:
            check_model_name(m.name)
        except UserError as err:
            raise UserError(f"{where}: {err}") from None
        if m.post_trained is not None:
            if m.post_trained not in by_label or m.post_trained == m.label:
                raise UserError(f"{where}: model {m.label}: post_trained {m.post_trained!r} is not another "
                                f"model of this sweep (models: {', '.join(labels)})")
            partners.append(m.post_trained)
            m.post_trained = by_label[m.post_trained].name
    if len(set(partners)) != len(partners) or set(partners) & {m.label for m in models if m.post_trained}:
        raise UserError(f"{where}: each model may be in one base/post-trained pair only, on one side")

