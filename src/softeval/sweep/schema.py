"""The sweep file (docs/reference/sweeps.md), declared once: its top level, its model, series and task entries, a
model's resources, and the `softeval run` options every level may set (the option table's sweep keys, run/config.py,
each checked by `softeval run`'s own check and named as the user wrote it). sweep/file.py reads every sweep file,
and `softeval track` its flags, through ``SweepFile`` (``checked``); `softeval schema sweep` prints it as JSON
Schema, which an editor checks a sweep file against as it is typed. What the values name (a model, a task, a
folder of checkpoints) is checked by sweep/entries.py and sweep/file.py.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Discriminator,
    Field,
    PlainValidator,
    Tag,
    ValidationInfo,
    create_model,
    model_validator,
)

from softeval.constants import KINDS
from softeval.declared import (
    MISSING,
    UNKNOWN,
    Declared,
    NonBlank,
    Problem,
    Refused,
    check,
    json_schema,
    refusal,
    said,
    worded,
)
from softeval.errors import UserError, did_you_mean, shown
from softeval.methods import default_names, names
from softeval.run.config import OPTIONS, SWEEP_FILE, SWEEP_OPTIONS, Option, Spelling
from softeval.run.validate import check_methods, check_option

DEFAULT_RETRIES = 2  # times a job is retried after its worker process or node died
WARM_STARTS = ("previous", "none")
_JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", dict: "object"}
_NON_EMPTY = "'{key}' must be a non-empty list, not {type} {value}"
_SEEDS = "'{key}' must be distinct whole numbers (a non-empty list), not {type} {value}"
_MODEL = "each model must be a name or a mapping with 'name', not {value}"
_TASK = "each task must be a name or a mapping with 'name', not {value}"


def _run_option(value: Any, info: ValidationInfo, key: str) -> Any:
    """A run option as `softeval run` checks it (its row of the option table: type, range, choices), named as
    the user wrote it: the file's key, or `softeval track`'s flag (the context's ``spelling``)."""
    spelling: Spelling = (info.context or {}).get("spelling", SWEEP_FILE)
    try:
        check_option(key, value, spelling)
    except UserError as err:
        raise worded(str(err)) from None
    return float(value) if OPTIONS[key].type is float and value is not None else value


def option_schema(row: Option) -> dict[str, Any]:
    """A run option's JSON Schema, from its row of the option table."""
    schema: dict[str, Any] = {"type": _JSON_TYPES[row.type]}
    if row.type in (int, float) and row.range is not None:
        schema["minimum"], schema["maximum"] = row.range
    elif row.type is float:
        schema["exclusiveMinimum"] = 0  # a positive finite number (run/validate.py)
    elif row.type is dict:
        schema["additionalProperties"] = {"type": ["string", "number", "boolean"]}
    if row.choices is not None:
        schema["enum"] = list(row.choices)
    if row.nullable:
        schema = {"anyOf": [schema, {"type": "null"}]}
    text = row.help() if callable(row.help) else row.help
    return {**schema, "default": row.default, "description": text.replace("%(default)s", str(row.default))}


def _option_schema(key: str, schema: dict[str, Any]) -> None:
    schema.clear()  # made when the schema is printed, so a backend registered since is among the choices
    schema.update(option_schema(OPTIONS[key]))


def _method_names(schema: dict[str, Any]) -> None:
    """The registry's methods (softeval.methods), a plug-in's included, as they are when the schema is printed."""
    schema["items"] = {"enum": list(names())}
    schema["description"] = f"the methods of these runs (default: {', '.join(default_names())})"


def _methods(methods: list[str]) -> list[str]:
    try:
        check_methods(methods, SWEEP_FILE)
    except UserError as err:
        raise worded(str(err)) from None
    return methods


def _distinct(seeds: list[int]) -> list[int]:
    if len(set(seeds)) != len(seeds):
        raise refusal(_SEEDS, seeds)
    return seeds


Methods = Annotated[list[str], Field(min_length=1, json_schema_extra=_method_names), said(_NON_EMPTY),
                    AfterValidator(_methods)]
Seeds = Annotated[list[int], Field(min_length=1, json_schema_extra={"uniqueItems": True}), said(_SEEDS),
                  AfterValidator(_distinct), Field(description="the seeds of these runs (default: [0])")]
# the prompt variants of these runs: 0 to K-1 (softeval run --prompt-variants; tasks/variants.py MOST_VARIANTS)
PromptVariants = Annotated[int, Field(ge=1, le=64, strict=True),
                           said("'{key}' must be a whole number of prompt variants from 1 to 64, not {value}"),
                           Field(description="score every method of these runs under prompt variants 0 to K-1 "
                                             "(default: the prompt_variant option, 0)")]
# The keys every level of the file may set: the option table's sweep keys, the methods and seeds to run, and how many
# prompt variants.
RunOptions = create_model(
    "RunOptions", __base__=Declared, __doc__="`softeval run` options, for every run below this level.",
    methods=(Methods, None), seeds=(Seeds, None), prompt_variants=(PromptVariants, None),
    **{key: (Annotated[Any, PlainValidator(partial(_run_option, key=key)),
                       Field(json_schema_extra=partial(_option_schema, key))], None) for key in SWEEP_OPTIONS})

_Amount = Annotated[float, Field(ge=0, allow_inf_nan=False), said("{key} must be a finite number >= 0, not {value}")]


def _whole_above_one(gpus: float) -> float:
    if gpus > 1 and gpus != int(gpus):
        raise refusal("{key} above 1 must be a whole number, not {value}", gpus)
    return gpus


class ResourcesSpec(Declared):
    """What a model's Ray worker reserves."""

    gpus: Annotated[_Amount, AfterValidator(_whole_above_one),
                    Field(description="GPUs; fractions below 1 share one (default: 1 when the cluster has a GPU, "
                                      "else 0)")] = None
    cpus: Annotated[_Amount, Field(description="CPUs, and the worker's threads (0 only with gpus > 0)")] = 1
    memory_gb: Annotated[_Amount, Field(description="memory Ray schedules by (not a limit it enforces)")] = None

    @model_validator(mode="after")
    def _bounded(self) -> ResourcesSpec:
        if self.cpus == 0 and not (self.gpus or 0) > 0:  # Ray: an actor reserving 0 CPUs is bounded by nothing else
            raise refusal("{key}.cpus 0 reserves no CPU, so nothing bounds how many workers run at once: give "
                          "cpus > 0 (or gpus > 0, which then bounds them)")
        return self


class _Model(RunOptions):
    kind: Annotated[Literal[KINDS] | None, said("{key} must be " + " or ".join(KINDS) + ", not {value}"),
                    Field(description="default: from the preset, else guessed from the name")] = None
    resources: Annotated[ResourcesSpec, said("{key} must be a mapping of gpus, cpus, memory_gb, not {type} {value}"),
                         Field(default_factory=ResourcesSpec)]


class ModelSpec(_Model):
    """A model: a preset, a hub id (org/name), a local folder or a .gguf file, with options for its runs."""

    name: Annotated[NonBlank, said(_MODEL), Field(description="the model (a path: relative to this file)")]
    post_trained: Annotated[str | None, said("{key} must name another model of this sweep, not {value}"),
                            Field(description="its post-trained partner in this file: a pair for compare.json")] \
        = None


class CheckpointSpec(Declared):
    """One checkpoint of a series given as a list."""

    path: str
    step: Annotated[int, Field(ge=0, description="default: the number in the folder's name")] = None


class SeriesSpec(_Model):
    """A series: the checkpoints of one training run, each scored as a model of its own (docs/reference/sweeps.md,
    "Series")."""

    model_config = ConfigDict(json_schema_extra={"oneOf": [{"required": ["series"]}, {"required": ["checkpoints"]}]})

    name: Annotated[NonBlank | None, said("a series' '{key}' must be text (quote it if it is a number), not {value}"),
                    Field(description="the series' name (default: the folder's name)")] = None
    series: Annotated[NonBlank, said("'{key}' must name a folder of checkpoints, not {value}"),
                      Field(description="a folder of checkpoints, sorted by the number in each name")] = None
    checkpoints: Annotated[list[str | CheckpointSpec], Field(min_length=1),
                           said("'{key}' must be a non-empty list of folders or {{path, step}} mappings, not {value}"),
                           Field(description="or the checkpoints one by one (then 'name' is required)")] = None
    warm_start: Annotated[Literal[WARM_STARTS], said("{key} must be " + " or ".join(WARM_STARTS) + ", not {value}"),
                          Field(description="previous: each soft prompt starts from the previous checkpoint's")] \
        = "previous"
    warm_steps: Annotated[int | None, Field(ge=1), said("{key} must be a whole number >= 1, not {value}"),
                          Field(description="tuning steps of a warm-started soft prompt (default: a third of "
                                            "steps)")] = None

    @model_validator(mode="after")
    def _one_list(self) -> SeriesSpec:
        if self.series is not None and self.checkpoints is not None:
            raise refusal("a series entry gives 'series' (a folder) or 'checkpoints' (a list), not both")
        if self.series is None and self.name is None:
            raise refusal("a series given as 'checkpoints' needs a 'name'")
        return self


class TaskSpec(RunOptions):
    """A task: a built-in task's name, a task file (relative to this file) or lm-eval:NAME, with options for its
    runs."""

    name: Annotated[NonBlank, said(_TASK), Field(description="the task")]


def _model_tag(entry: Any) -> str:
    if isinstance(entry, str):
        return "name"
    if isinstance(entry, SeriesSpec) or isinstance(entry, dict) and ("series" in entry or "checkpoints" in entry):
        return "series"
    return "model"


def _task_tag(entry: Any) -> str:
    return "name" if isinstance(entry, str) else "task"


ModelItem = Annotated[Annotated[NonBlank, Tag("name")] | Annotated[ModelSpec, Tag("model")]
                      | Annotated[SeriesSpec, Tag("series")], Discriminator(_model_tag), said(_MODEL)]
TaskItem = Annotated[Annotated[NonBlank, Tag("name")] | Annotated[TaskSpec, Tag("task")], Discriminator(_task_tag),
                     said(_TASK)]


class SweepFile(RunOptions):
    """A sweep file: the runs of every model x task x method x seed, with the options given at each level (the
    most specific wins: task over model over this top level)."""

    out: Annotated[NonBlank, said("'{key}' must name a folder, not {type} {value}"),
                   Field(description="the output root: one folder every worker sees (relative to this file)")]
    models: Annotated[list[ModelItem], Field(min_length=1), said(_NON_EMPTY),
                      Field(description="a name, a mapping with 'name', or a series")]
    tasks: Annotated[list[TaskItem], Field(min_length=1), said(_NON_EMPTY),
                     Field(description="a name, or a mapping with 'name'")]
    retries: Annotated[int, Field(ge=0), said("'{key}' must be a whole number >= 0, not {value}"),
                       Field(description="times a job is retried after its worker died")] = DEFAULT_RETRIES


def checked(spec: dict, where: str, spelling: Spelling = SWEEP_FILE) -> SweepFile:
    """A parsed sweep file read as ``SweepFile``; its first mistake is one UserError starting with ``where`` and
    naming the entry it is in. ``spelling``: how run options are named (`softeval track`: its flags)."""
    try:
        return check(SweepFile, spec, spelling=spelling)
    except Refused as refused:
        raise UserError(_words(refused.problem, spec, where)) from None


def _words(problem: Problem, spec: dict, where: str) -> str:
    at, below = _entry(problem.at, spec, where)
    key = ".".join(map(str, below))
    if problem.kind == UNKNOWN:
        unknown = str(problem.keys[0])
        hint = did_you_mean(unknown, problem.allowed) or f" (allowed: {', '.join(sorted(problem.allowed))})"
        return f"{at}{', ' + key if key else ''}: unknown key '{unknown}'{hint}"
    if problem.kind == MISSING and problem.at:  # an entry without its name
        entry = spec[problem.at[0]][problem.at[1]]
        return f"{where}: " + (_MODEL if problem.at[0] == "models" else _TASK).format(value=shown(entry))
    if problem.kind == MISSING:
        return f"{where}: '{problem.keys[0]}' is missing"
    return f"{at}: {problem.words(key)}"


def _entry(loc: tuple, spec: dict, where: str) -> tuple[str, tuple]:
    """How errors name the part of the file at ``loc`` (``sweep file F, model m``), and the keys below it. pydantic
    puts the union member an entry was read as after its position: name, model, series or task."""
    if len(loc) < 3 or loc[0] not in ("models", "tasks"):
        return where, loc
    entry, member = spec[loc[0]][loc[1]], loc[2]
    name = entry.get("name") if isinstance(entry, dict) else entry
    if member == "series" and name is None and isinstance(entry.get("series"), str):
        name = Path(entry["series"].rstrip("/")).name
    if not isinstance(name, str) or not name.strip():  # named by its place in the list
        return f"{where}, {loc[0]} entry {loc[1] + 1}", loc[3:]
    return f"{where}, {'model' if member in ('name', 'model') else member} {name}", loc[3:]


def sweep_file_schema() -> dict[str, Any]:
    """The sweep file as JSON Schema (`softeval schema sweep`)."""
    return json_schema(SweepFile, "softeval sweep file", "Many models x tasks x methods x seeds in one command "
                       "(docs/reference/sweeps.md): `softeval sweep FILE`.")
