"""The entries of a sweep file: a model (or a series of checkpoints) with its resources, a task, and
the `softeval run` options any level of the file may set (top level, model, task: the option table's
sweep keys, run/config.py). Each check names the file, the entry and the key as the file writes it.
The file as a whole and its jobs are sweep/file.py's."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from softeval.checks import is_data_file, is_number, is_whole
from softeval.errors import UserError, did_you_mean, shown
from softeval.lm.models import check_model_name
from softeval.protocol import KINDS
from softeval.run.config import OPTIONS, SWEEP_FILE, SWEEP_OPTIONS
from softeval.run.validate import check_methods, check_type
from softeval.sweep.series import discover, from_list
from softeval.tasks import get_task
from softeval.tasks.custom import is_task_file
from softeval.tasks.lmeval_bridge import PREFIX, is_lmeval
from softeval.tasks.lmeval_group import GroupPlan, is_group, plan

LIST_KEYS = ("methods", "seeds")  # may also be narrowed per model or per task
MODEL_KEYS = {"name", "kind", "post_trained", "resources", *LIST_KEYS, *SWEEP_OPTIONS}
# A model entry that is a series of checkpoints (softeval.sweep.series): a folder, or an explicit list.
SERIES_KEYS = {"name", "series", "checkpoints", "warm_start", "warm_steps", "kind", "resources", *LIST_KEYS,
               *SWEEP_OPTIONS}
WARM_STARTS = ("previous", "none")
# A warm-started soft prompt tunes for a third of `steps` (rounded up) unless `warm_steps` says otherwise.
# Measured on the synthetic trained series (bench_warm_start.py at a1bd43a, docs/sweeps.md "Series"):
# warm starts of 10 steps reached the held-out format and final loss of fresh 30-step starts at every
# checkpoint; 5 steps reached the format but not the loss.
WARM_STEPS_FRACTION = 3
TASK_KEYS = {"name", *LIST_KEYS, *SWEEP_OPTIONS}
RESOURCE_KEYS = {"gpus", "cpus", "memory_gb"}
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


def check_keys(entry: dict, allowed: set[str], where: str) -> None:
    for key in entry:
        if key not in allowed:
            hint = did_you_mean(key, allowed) or f" (allowed: {', '.join(sorted(allowed))})"
            raise UserError(f"{where}: unknown key '{key}'{hint}")


def as_list(value: Any, key: str, where: str) -> list:
    if not isinstance(value, list) or not value:
        raise UserError(f"{where}: '{key}' must be a non-empty list")
    return value


def resolve(here: Path, text: str) -> Path:
    path = Path(os.path.expanduser(text))
    return Path(os.path.abspath(path if path.is_absolute() else here / path))


def level_options(entry: dict, where: str, here: Path) -> dict[str, Any]:
    """The run options and the methods/seeds lists of one level of the file, type-checked."""
    options: dict[str, Any] = {}
    for key in SWEEP_OPTIONS:  # the run options a sweep file may set, typed by the table
        if key not in entry:
            continue
        value, row = entry[key], OPTIONS[key]
        try:
            check_type(key, value, SWEEP_FILE)  # its range and choices: when the job's config is checked
        except UserError as err:
            raise UserError(f"{where}: {err}") from None
        options[key] = float(value) if row.type is float and value is not None else value
    source = options.get("source")
    if source is not None and is_data_file(source):
        options["source"] = str(resolve(here, source))
    if isinstance(options.get("include_path"), str):  # a folder of lm-eval YAMLs, as the other paths
        options["include_path"] = str(resolve(here, options["include_path"]))
    if "methods" in entry:
        methods = as_list(entry["methods"], "methods", where)
        try:
            check_methods(methods, SWEEP_FILE)
        except UserError as err:
            raise UserError(f"{where}: {err}") from None
        options["methods"] = list(methods)
    if "seeds" in entry:
        seeds = as_list(entry["seeds"], "seeds", where)
        if not all(is_whole(s) for s in seeds) or len(set(seeds)) != len(seeds):
            raise UserError(f"{where}: 'seeds' must be distinct whole numbers, not {shown(seeds)}")
        options["seeds"] = list(seeds)
    return options


def model_entry(entry: Any, where: str, here: Path) -> ModelEntry:
    if isinstance(entry, str):
        entry = {"name": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"].strip():
        raise UserError(f"{where}: each model must be a name or a mapping with 'name', not {shown(entry)}")
    label = entry["name"]
    at = f"{where}, model {label}"
    check_keys(entry, MODEL_KEYS, at)
    local = resolve(here, label)
    name = str(local) if local.exists() else label  # a local folder or .gguf file relative to the file
    kind = entry.get("kind")
    if kind not in (None, *KINDS):
        raise UserError(f"{at}: kind must be base or post-trained, not {shown(kind)}")
    partner = entry.get("post_trained")
    if partner is not None and not isinstance(partner, str):
        raise UserError(f"{at}: post_trained must name another model of this sweep")
    resources = Resources()
    if "resources" in entry:
        given = entry["resources"]
        if not isinstance(given, dict):
            raise UserError(f"{at}: resources must be a mapping of gpus, cpus, memory_gb")
        check_keys(given, RESOURCE_KEYS, f"{at}, resources")
        for key, value in given.items():
            if not is_number(value) or not 0 <= value < math.inf:
                raise UserError(f"{at}: resources.{key} must be a finite number >= 0, not {shown(value)}")
        resources = replace(resources, **{k: float(v) for k, v in given.items()})
        # Ray: an actor reserving 0 CPUs is bounded by nothing else
        if resources.cpus == 0 and not (resources.gpus or 0) > 0:
            raise UserError(f"{at}: resources.cpus 0 reserves no CPU, so nothing bounds how many workers run at once: "
                            "give cpus > 0 (or gpus > 0, which then bounds them)")
        if resources.gpus is not None and resources.gpus > 1 and resources.gpus != int(resources.gpus):
            raise UserError(f"{at}: resources.gpus above 1 must be a whole number, not {resources.gpus:g}")
    return ModelEntry(name, label, kind, partner, resources, level_options(entry, at, here))


def series_entries(entry: dict, where: str, here: Path) -> list[ModelEntry]:
    """A series entry: one ModelEntry per checkpoint, in step order, labelled ``<name>@<step>``."""
    if "series" in entry and "checkpoints" in entry:
        raise UserError(f"{where}: a series entry gives 'series' (a folder) or 'checkpoints' (a list), not both")
    given = entry.get("series")
    if "series" in entry and (not isinstance(given, str) or not given.strip()):
        raise UserError(f"{where}: 'series' must name a folder of checkpoints, not {shown(given)}")
    if "name" in entry and (not isinstance(entry["name"], str) or not entry["name"].strip()):
        raise UserError(f"{where}: a series' 'name' must be text (quote it if it is a number), "
                        f"not {shown(entry['name'])}")
    name = entry.get("name", Path(given.rstrip("/")).name if given else None)
    if not isinstance(name, str) or not name.strip():
        raise UserError(f"{where}: a series given as 'checkpoints' needs a 'name'")
    at = f"{where}, series {name}"
    check_keys(entry, SERIES_KEYS, at)
    checkpoints = discover(resolve(here, given)) if given else from_list(entry["checkpoints"], at, here)
    warm = entry.get("warm_start", "previous")
    if warm not in WARM_STARTS:
        raise UserError(f"{at}: warm_start must be {' or '.join(WARM_STARTS)}, not {shown(warm)}")
    warm_steps = entry.get("warm_steps")
    if warm_steps is not None and (not is_whole(warm_steps) or warm_steps < 1):
        raise UserError(f"{at}: warm_steps must be a whole number >= 1, not {shown(warm_steps)}")
    base = model_entry({k: v for k, v in entry.items() if k in MODEL_KEYS and k != "name"} | {"name": name},
                       where, here)
    return [replace(base, name=str(resolve(here, str(c.path))), label=f"{name}@{c.step}", series=name, step=c.step,
                    warm_start=warm == "previous", warm_steps=warm_steps, options=dict(base.options))
            for c in checkpoints]


def task_entries(entry: Any, where: str, here: Path, include_path: str | None = None
                 ) -> tuple[list[TaskEntry], GroupPlan | None]:
    """A task of the file; ``include_path``: the file's top-level one (the task's own wins). An lm-eval
    group or tag is its subtasks, each a task of the sweep with the entry's options, and its plan
    (tasks/lmeval_group.py), which the sweep records in its output root."""
    if isinstance(entry, str):
        entry = {"name": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"].strip():
        raise UserError(f"{where}: each task must be a name or a mapping with 'name', not {shown(entry)}")
    at = f"{where}, task {entry['name']}"
    check_keys(entry, TASK_KEYS, at)
    name = str(resolve(here, entry["name"])) if is_task_file(entry["name"]) else entry["name"]
    options = level_options(entry, at, here)
    include = options.get("include_path", include_path)
    try:
        if is_lmeval(name) and is_group(name, include):
            group = plan(name, include)
            return [TaskEntry(PREFIX + task, dict(options)) for task in group.tasks], group
        get_task(name, include)
    except UserError as err:
        raise UserError(f"{where}: {err}") from None
    return [TaskEntry(name, options)], None


def check_models(models: list[ModelEntry], where: str) -> None:
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
                raise UserError(f"{where}: model {m.label}: post_trained {shown(m.post_trained)} is not another "
                                f"model of this sweep (models: {', '.join(labels)})")
            partners.append(m.post_trained)
            m.post_trained = by_label[m.post_trained].name
    if len(set(partners)) != len(partners) or set(partners) & {m.label for m in models if m.post_trained}:
        raise UserError(f"{where}: each model may be in one base/post-trained pair only, on one side")
