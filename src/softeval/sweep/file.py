"""The sweep file: which models, tasks, methods and seeds to run, with which `softeval run` options.

A sweep file is YAML (read with ``yaml.safe_load``, in the bounds of ``softeval.yamlfile``). Every key
is checked by the file's one declaration (sweep/schema.py, which `softeval schema sweep` prints as JSON Schema):
an unknown key is an error naming the key and the file, so a typo never silently falls back to a default, and
a value of the wrong type or out of range is refused as `softeval run` refuses it. Paths in the file (``out``,
local model folders, task files, data files given as ``source``, ``include_path``) are relative to the file's
folder. The reference is docs/reference/sweeps.md.

Options are layered: the file's top level, then the model entry, then the task entry (the most
specific wins). Each (model, task, method, seed) becomes one ``RunConfig``: the very config that
``softeval run`` would build for the same flags, so the run folder and its identity are the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import product
from pathlib import Path
from typing import Any

import yaml

from softeval.constants import ADAPTER_WEIGHTS
from softeval.errors import UserError, shown
from softeval.lm.softprompt import init_from
from softeval.methods import default_names, maker_of, spec_of
from softeval.run.config import COMMAND_LINE, SWEEP_FILE, RunConfig, Spelling
from softeval.run.lmeval_groups import group_record
from softeval.run.pipeline import check_variants, own_folder
from softeval.run.validate import check_config, unused_note
from softeval.sweep.entries import (
    WARM_STEPS_FRACTION,
    ModelEntry,
    TaskEntry,
    check_models,
    level_options,
    model_entry,
    resolve,
    series_entries,
    task_entries,
)
from softeval.sweep.schema import DEFAULT_RETRIES, ModelSpec, SeriesSpec, TaskSpec, checked
from softeval.tasks import get_task
from softeval.tasks.lmeval_bridge import is_lmeval
from softeval.tasks.variants import variant_task
from softeval.yamlfile import BoundedLoader, read_yaml


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
        method = self.warm_from.config.methods[0]
        source = own_folder(self.warm_from.config, method).final / spec_of(method).folder
        if not (source / ADAPTER_WEIGHTS).is_file():
            return None
        return replace(self.config, init=init_from(source))

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
    groups: list[dict] = field(default_factory=list)  # lm-eval groups' records (store/lmeval_groups.py), written by run
    # the options written that no run of a task uses, one line a task (validate.unused_note): said once every check
    # has passed (view.print_notes), as `softeval run` says them before its model loads
    notes: list[str] = field(default_factory=list)

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return [(m.name, m.post_trained) for m in self.models if m.post_trained]


def load_sweep(path: str | Path, local: bool = True) -> Sweep:
    """Read and check a sweep file; every mistake is one UserError naming the file. ``local``: parse_sweep."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"sweep file not found: {path}")
    if not path.is_file():
        raise UserError(f"sweep file {path} is not a file")
    spec = read_yaml(path, f"sweep file {path}", _StrictLoader)  # bounded safe_load, no repeated keys
    return parse_sweep(spec, path, local=local)


class _StrictLoader(BoundedLoader):
    """yaml.safe_load (in softeval.yamlfile's bounds), except that a key given twice in one mapping is an
    error (YAML keeps the last one silently, so `steps: 80` further down would quietly win). Merge keys
    (``<<: *shared``) work as in yaml.safe_load: a key written in the mapping overrides the merged one."""

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


def parse_sweep(spec: Any, path: Path, where: str | None = None, command: str = "sweep",
                local: bool = True) -> Sweep:
    """``path``: the file (relative paths in it are relative to its folder); ``where``: how errors
    name it (default: 'sweep file PATH'); ``command``: ``sweep`` or ``track`` (Sweep.command; track's run options
    are its flags, and its errors name them so); ``local``: the workers run on this machine (Ray started here, no
    ``--address``), so the backend is checked here as `softeval run` checks it (vLLM installed for the device),
    before Ray starts."""
    where = where or f"sweep file {path}"
    spelling = COMMAND_LINE if command == "track" else SWEEP_FILE
    if not isinstance(spec, dict):
        raise UserError(f"{where}: expected a mapping with models, tasks and out")
    declared = checked(spec, where, spelling)  # every key known, every value typed (sweep/schema.py)
    here = path.parent
    out = resolve(here, declared.out)
    shared = level_options(declared, here)
    models = _models(declared.models, where, here)
    tasks, groups = _tasks(declared.tasks, where, here, shared.get("include_path"))
    check_models(models, where)
    jobs, notes = _jobs(models, tasks, shared, out, where, spelling, local)
    _one_writer_per_folder(jobs, where)
    return Sweep(path, out, models, tasks, jobs, declared.retries, command, groups, notes)


def _models(given: list[str | ModelSpec | SeriesSpec], where: str, here: Path) -> list[ModelEntry]:
    """The file's models in its order, a series as its checkpoints; two series of one name are refused."""
    models: list[ModelEntry] = []
    series_names: set[str] = set()
    for entry in given:
        if not isinstance(entry, SeriesSpec):
            models.append(model_entry(entry, here))
            continue
        checkpoints = series_entries(entry, where, here)
        if checkpoints[0].series in series_names:
            raise UserError(f"{where}: two series are named {shown(checkpoints[0].series)}: "
                            "give each a distinct 'name'")
        series_names.add(checkpoints[0].series)
        models += checkpoints
    return models


def _tasks(given: list[str | TaskSpec], where: str, here: Path, include_path: str | None
           ) -> tuple[list[TaskEntry], list[dict]]:
    """The file's tasks, an lm-eval group as its subtasks (its record to write: ``groups``); a task listed
    twice is refused."""
    tasks: list[TaskEntry] = []
    groups: list[dict] = []
    for entry in given:
        entries, group = task_entries(entry, where, here, include_path)
        tasks += entries
        if group is not None:  # an lm-eval group: its subtasks are the sweep's tasks, its record is written
            groups.append(group_record(entries[0].options.get("include_path", include_path), group))
    if len({t.name for t in tasks}) != len(tasks):
        raise UserError(f"{where}: a task is listed twice")
    return tasks, groups


def _jobs(models: list[ModelEntry], tasks: list[TaskEntry], shared: dict[str, Any], out: Path, where: str,
          spelling: Spelling, local: bool) -> tuple[list[SweepJob], list[str]]:
    """One job per model, task, seed and method, in that order, each config checked as `softeval run` checks
    it; ``shared``: the top level's options, which a model's and then a task's override. And the notes on options
    no run of a task uses (Sweep.notes)."""
    jobs: list[SweepJob] = []
    previous: dict[tuple, SweepJob] = {}  # (series, task, seed, variant) -> the last checkpoint's soft-prompt job
    notes: dict[str, None] = {}  # each distinct unused-options note, once, in order
    for model, task in product(models, tasks):
        levels = (shared, model.options, task.options)
        options = merged_levels(levels, f"{where}, model {model.label}, task {task.name}")
        methods, seeds = options.pop("methods"), options.pop("seeds")
        note = _unused(model.name, task.name, methods, {key for level in levels for key in level}, options, spelling)
        if note:
            notes.setdefault(f"note: {where}, task {task.name}: {note}")
        variants = prompt_variants(options, task.name, f"{where}, model {model.label}, task {task.name}", notes)
        for seed, variant, method in product(seeds, variants, methods):
            config = RunConfig(model=model.name, task=task.name, methods=(method,), seed=seed, out=str(out),
                               kind=model.kind, series=model.series, step=model.step,
                               **{**options, "prompt_variant": variant})
            _check_config(config, f"{where}, model {model.label}, task {task.name}", spelling, local)
            jobs.append(_warm_start(SweepJob(model, config, len(jobs)), previous))
    return jobs, list(notes)


def _unused(model: str, task: str, methods: list[str], given: set[str], options: dict[str, Any],
            spelling: Spelling) -> str | None:
    """What `softeval run` says of the options ``given`` at any level that none of the pair's ``methods`` reads, or
    ``permutations`` on a task that is not multiple choice (``validate.unused_note``), without its 'note: '."""
    config = RunConfig(model=model, task=task, methods=tuple(methods))
    multiple_choice = "permutations" not in given or get_task(task, options.get("include_path")).multiple_choice
    note = unused_note(config, given, multiple_choice, spelling, runs="its runs")
    return note and note.removeprefix("note: ")


VARIANT_KEYS = ("prompt_variant", "prompt_variants")  # one variant, or K of them: a level sets one


def merged_levels(levels: tuple[dict[str, Any], ...], where: str) -> dict[str, Any]:
    """The options of a job: the defaults, then each level's (the top, a model's, a task's), a lower level's over a
    higher one's. A level that picks the prompt variants (``prompt_variant: N`` or ``prompt_variants: K``) replaces
    what a higher level picked; one level setting both is refused."""
    options: dict[str, Any] = {"methods": list(default_names()), "seeds": [0]}
    for level in levels:
        given = [key for key in VARIANT_KEYS if key in level]
        if len(given) == 2:
            raise UserError(f"{where}: 'prompt_variants: {level['prompt_variants']}' runs variants 0 to "
                            f"{level['prompt_variants'] - 1}: leave out 'prompt_variant: {level['prompt_variant']}'")
        if given:
            for key in VARIANT_KEYS:
                options.pop(key, None)
        options.update(level)
    return options


def prompt_variants(options: dict[str, Any], task: str, where: str, notes: dict[str, None]) -> list[int]:
    """The prompt variants a job's ``prompt_variants: K`` asks of ``task`` (0 to K-1; popped from ``options``), or
    its one ``prompt_variant`` (default 0). An lm-eval task keeps lm-eval's prompt: variant 0 only, said once (a
    line added to ``notes``).
    A variant the task does not have is refused here, before any worker starts, as `softeval run` refuses it."""
    count = options.pop("prompt_variants", None)
    if count is None:
        variant = options.pop("prompt_variant", 0)
        if variant:
            variant_task(get_task(task, options.get("include_path")), variant, f"{where}: 'prompt_variant: {variant}'")
        return [variant]
    if count > 1 and is_lmeval(task):
        notes.setdefault(f"note: {where}: an lm-eval task keeps lm-eval's prompt, so it is scored under variant 0 "
                         f"only ('prompt_variants: {count}' applies to its other tasks)")
        return [0]
    if count > 1:
        try:
            check_variants(get_task(task, options.get("include_path")), count, SWEEP_FILE)
        except UserError as err:
            raise UserError(f"{where}: {err}") from None
    return list(range(count))


def _warm_start(job: SweepJob, previous: dict[tuple, SweepJob]) -> SweepJob:
    """A series' job of a method whose part warm-starts (``PartMaker.warm_starts``: the soft prompt) starts from the
    part of the previous checkpoint's job of the same task and seed (``previous``, updated here), tuning for fewer
    steps, where its series says so."""
    model, method = job.model, job.method
    maker = maker_of(method)
    if maker is not None and maker.warm_starts and model.series is not None:
        key = (model.series, job.config.task, job.config.seed, job.config.prompt_variant)
        if model.warm_start and key in previous:
            job.warm_from = previous[key]
            steps = model.warm_steps or -(-job.config.steps // WARM_STEPS_FRACTION)
            job.config = replace(job.config, steps=steps)
        previous[key] = job
    return job


def _one_writer_per_folder(jobs: list[SweepJob], where: str) -> None:
    """Every job writes its own run folder: two models whose folder names are alike (two local folders
    both called 'final', or one model listed under two spellings) would write the same runs."""
    seen: dict[Path, SweepJob] = {}
    for job in jobs:
        final = own_folder(job.config, job.method).final
        if final in seen:
            other = seen[final].model
            raise UserError(f"{where}: models {shown(other.label)} and {shown(job.model.label)} "
                            "would write the same run "
                            f"folders ({final.parent.parent.parent.name}/...): give one folder another name, "
                            "list the model once, or use two sweeps with different out folders")
        seen[final] = job


def _check_config(config: RunConfig, where: str, spelling: Spelling, local: bool) -> None:
    """The checks of `softeval run`, on the driver, naming each option as the user wrote it (a sweep
    file's key, or `softeval track`'s flag: ``spelling``). The device and the output root are the
    workers': only the device's name is checked here (the driver of a GPU cluster may have none), and
    ``out`` is probed from the driver and each worker. The backend is checked on this machine's device
    when the workers run here (``local``), else what can be checked away from them."""
    try:
        check_config(config, spelling=spelling, on_worker=("device", "out") + (() if local else ("backend",)))
    except UserError as err:
        raise UserError(f"{where}: {err}") from None
