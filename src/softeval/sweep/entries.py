"""The entries of a sweep file as runs see them: a model (or a series of checkpoints) with its resources, a task,
and the `softeval run` options any level of the file may set (top level, model, task: the option table's sweep
keys, run/config.py). Their keys and types are declared and checked by sweep/schema.py; here each entry's paths are
resolved from the file's folder and what it names is checked (a model's name, a task, an lm-eval group, a
base/post-trained pair), each error naming the file and the entry. The file as a whole and its jobs are
sweep/file.py's."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from softeval.checks import is_data_file
from softeval.errors import UserError, shown
from softeval.lm.models import check_model_name
from softeval.sweep.schema import ModelSpec, ResourcesSpec, RunOptions, SeriesSpec, TaskSpec
from softeval.sweep.series import discover, from_list
from softeval.tasks import get_task
from softeval.tasks.custom import is_task_file
from softeval.tasks.lmeval_bridge import PREFIX, is_lmeval
from softeval.tasks.lmeval_group import GroupPlan, is_group, plan

MODEL_KEYS = set(ModelSpec.model_fields)  # the keys of a model entry (sweep/schema.py), run options included
TASK_KEYS = set(TaskSpec.model_fields)
# A warm-started soft prompt tunes for a third of `steps` (rounded up) unless `warm_steps` says otherwise.
# Measured on the synthetic trained series (bench_warm_start.py at a1bd43a, docs/research/design.md "Warm steps for
# a series"):
# warm starts of 10 steps reached the held-out format and final loss of fresh 30-step starts at every
# checkpoint; 5 steps reached the format but not the loss.
WARM_STEPS_FRACTION = 3


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


def resolve(here: Path, text: str) -> Path:
    path = Path(os.path.expanduser(text))
    return Path(os.path.abspath(path if path.is_absolute() else here / path))


def level_options(spec: RunOptions, here: Path) -> dict[str, Any]:
    """The run options and the methods/seeds lists one level of the file gives (sweep/schema.py has checked them),
    its paths resolved from the file's folder."""
    options = {key: getattr(spec, key) for key in RunOptions.model_fields if key in spec.model_fields_set}
    source = options.get("source")
    if source is not None and is_data_file(source):
        options["source"] = str(resolve(here, source))
    if isinstance(options.get("include_path"), str):  # a folder of lm-eval YAMLs, as the other paths
        options["include_path"] = str(resolve(here, options["include_path"]))
    return options


def model_entry(spec: ModelSpec | str, here: Path) -> ModelEntry:
    """A model entry (or a model's name) as its runs see it: a local folder or .gguf file relative to the file
    made absolute."""
    if isinstance(spec, str):
        spec = ModelSpec(name=spec)
    local = resolve(here, spec.name)
    name = str(local) if local.exists() else spec.name
    return ModelEntry(name, spec.name, spec.kind, spec.post_trained, _resources(spec.resources),
                      level_options(spec, here))


def _resources(spec: ResourcesSpec) -> Resources:
    return Resources(**{key: float(getattr(spec, key)) for key in spec.model_fields_set})


def series_entries(spec: SeriesSpec, where: str, here: Path) -> list[ModelEntry]:
    """A series entry: one ModelEntry per checkpoint, in step order, labelled ``<name>@<step>``."""
    name = spec.name or Path(spec.series.rstrip("/")).name
    if not name.strip():
        raise UserError(f"{where}: the series {shown(spec.series)} needs a 'name' (its folder gives none)")
    at = f"{where}, series {name}"
    if spec.series is not None:
        checkpoints = discover(resolve(here, spec.series))
    else:
        listed = [c if isinstance(c, str) else c.model_dump(exclude_unset=True) for c in spec.checkpoints]
        checkpoints = from_list(listed, at, here)
    base = ModelEntry(name, name, spec.kind, None, _resources(spec.resources), level_options(spec, here))
    return [replace(base, name=str(resolve(here, str(c.path))), label=f"{name}@{c.step}", series=name, step=c.step,
                    warm_start=spec.warm_start == "previous", warm_steps=spec.warm_steps, options=dict(base.options))
            for c in checkpoints]


def task_entries(spec: TaskSpec | str, where: str, here: Path, include_path: str | None = None
                 ) -> tuple[list[TaskEntry], GroupPlan | None]:
    """A task of the file; ``include_path``: the file's top-level one (the task's own wins). An lm-eval
    group or tag is its subtasks, each a task of the sweep with the entry's options, and its plan
    (tasks/lmeval_group.py), which the sweep records in its output root."""
    if isinstance(spec, str):
        spec = TaskSpec(name=spec)
    name = str(resolve(here, spec.name)) if is_task_file(spec.name) else spec.name
    options = level_options(spec, here)
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
