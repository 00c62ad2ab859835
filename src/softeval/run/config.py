"""The run options: ``RunConfig``, whose fields are the one option table.

Each option is a field of ``RunConfig`` that carries, beside its default, its type, its allowed range
or choices, its help text and where it may be given (``option``). That table is the source of
argparse's flags, choices and defaults (cli/app.py), of the keys and types a sweep file may set
(sweep/file.py) and the flags `softeval track` passes on (cli/track.py), of the range checks
(run/validate.py) and of ``TuneConfig``'s defaults (run/tuning_loop.py): a default or a range is written once,
here. ``backend``'s choices, default and help are the backend registry's (lm/backends.py). ``series`` and
``step`` are set by `softeval sweep` and
`softeval track` only, and ``methods`` has a flag of its own per command (``--method``), so they are
fields without an entry in the table.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from softeval.constants import CHAT_TEMPLATES, KINDS, WORKED_SOLUTION
from softeval.errors import UserError
from softeval.lm.backends import DEFAULT, NAMES, backend_help
from softeval.lm.settings import LORA_TARGETS, TUNE_DTYPES
from softeval.methods import default_names
from softeval.store.identity import ANSWER_LINE, FINGERPRINT, PROMPT_GRAMMAR, TASK_REVISION, TUNE_DTYPE_RESOLVED

LR_SCHEDULES = ("constant", "linear")  # run/tuning_loop.py: lr_at

LM_EVAL = "lm_eval"  # the identity key of an lm-eval task: lm-eval's version and the task config's digest

# The tuning options whose default depends on what the task's targets are (``Task.target_kind``): a built-in task
# whose targets are worked solutions ending in an answer line (GSM8K, MATH-500) tunes with these, every other task
# with the table's defaults (chosen on multiple choice). docs/research/design.md, "Defaults by kind of target", has
# the runs that chose them: with the table's defaults GSM8K's soft prompt wrote its format on 0.10 of the items.
TARGET_DEFAULTS: dict[str, dict[str, Any]] = {
    WORKED_SOLUTION: {"lr": 0.3, "lr_schedule": "linear", "init": "instruction", "answer_share": 0.5},
}


class _ByTarget:
    """The field default of such an option: "not given", which ``RunConfig`` replaces by its task's default."""

    def __repr__(self) -> str:
        return "BY_TARGET"


BY_TARGET = _ByTarget()


def on_worked_solutions(key: str) -> str:
    """The help's words on an option's default for worked solutions."""
    from softeval.tasks import REGISTRY  # read when the help is shown: the option table imports no task

    names = ", ".join(name for name, task in REGISTRY.loaded().items()
                      if not isinstance(task, UserError) and task.target_kind == WORKED_SOLUTION)
    return f"{TARGET_DEFAULTS[WORKED_SOLUTION][key]} on tasks whose targets are worked solutions: {names}"


def worked_help(text: str, key: str) -> Callable[[], str]:
    """The help of an option whose default depends on the kind of target: ``text`` with ``{worked}`` replaced
    by ``on_worked_solutions(key)``, written when help shows it."""
    return lambda: text.replace("{worked}", on_worked_solutions(key))


# Where an option may be given: on run, tune and eval ("common"), on run and tune ("tuning"), on eval
# only ("eval"). Every option but those with sweep=False may also be set in a sweep file.
COMMON, TUNING, EVAL = "common", "tuning", "eval"

# The groups an option is shown in (`softeval run -h`, docs/reference/cli.md), in the order shown: the options
# most runs set first, the research knobs last. Each group's title, and the line under it.
MODEL, METHODS, TUNE, LORA, ENGINE, OUTPUT, ADVANCED = (
    "model and task", "methods", "tuning", "LoRA", "engine", "output", "advanced")
GROUPS: dict[str, str] = {
    MODEL: "what is evaluated: the model, the task and its data",
    METHODS: "which methods score it, and their shots and seed",
    TUNE: "the soft prompt's tuning (run and tune)",
    LORA: "--method lora's adapter (run and tune)",
    ENGINE: "where and how the model runs",
    OUTPUT: "where the run folders go, and what happens to finished ones",
    ADVANCED: "research knobs: the tuning loss, the curve, batching, precision",
}


@dataclass(frozen=True)
class Option:
    """One row of the option table: a RunConfig field as the user sets it."""

    key: str  # the RunConfig field and the sweep file's key
    # int, float, str or bool (a bool is a switch on the command line), or dict (KEY=VALUE flags, given
    # again for each key; a mapping in a sweep file)
    type: type
    default: Any
    help: str | Callable[[], str]  # or what writes it when --help shows it (--backend's: the registry's backends)
    range: tuple[float, float] | None = None  # smallest and largest allowed value (numbers)
    choices: Collection[str] | None = None
    nullable: bool = False  # None is allowed (it means "not set")
    where: str = COMMON
    sweep: bool = True  # a sweep file may set it
    required: bool = False  # on the command line (a sweep file names models and tasks its own way)
    metavar: str | None = None
    flag_name: str | None = None  # the flag, where it is not --KEY (a dict's flag names one entry)
    # its default depends on the task's kind of target (TARGET_DEFAULTS; ``default`` is the one-line targets'):
    # not given, the field is BY_TARGET until RunConfig resolves it
    by_target: bool = False
    group: str = ADVANCED  # where help and the reference show it (GROUPS)

    @property
    def flag(self) -> str:
        return self.flag_name or "--" + self.key.replace("_", "-")


def option(type_: type, default: Any, help: str | Callable[[], str], **row: Any):
    """A RunConfig field that is an option; ``row``: the rest of its Option. A required option is a
    field without a default."""
    metadata = {"option": dict(type=type_, default=default, help=help, **row)}
    if row.get("required"):
        return field(metadata=metadata)
    return field(default=BY_TARGET if row.get("by_target") else default, metadata=metadata)


@dataclass(frozen=True)
class Spelling:
    """How the user wrote an option, for the messages that name it: ``--steps 80`` on the command line,
    ``steps: 80`` in a sweep file."""

    command_line: bool = True

    def key(self, key: str) -> str:
        if not self.command_line:
            return f"'{key}'"
        return OPTIONS[key].flag if key in OPTIONS else "--" + key.replace("_", "-")

    def setting(self, key: str, value: Any) -> str:
        return f"{self.key(key)} {value}" if self.command_line else f"{key}: {value}"


COMMAND_LINE, SWEEP_FILE = Spelling(True), Spelling(False)
SEED_RANGE = (-(2**63), 2**63 - 1)


@dataclass
class RunConfig:
    model: str = option(str, None, "preset name, hub id, local folder or .gguf file", required=True, sweep=False,
                        group=MODEL)
    task: str = option(str, None, "task name (see `softeval tasks`)", required=True, sweep=False, group=MODEL)
    methods: tuple[str, ...] = field(default_factory=default_names)  # the registry's (softeval.methods)
    limit: int | None = option(int, None, "score this many test items (same items for every run; default: all)",
                               range=(1, 10**9), nullable=True, group=MODEL)
    shots: int = option(int, 5, "solved examples for few-shot (default %(default)s)", range=(0, 1_000), group=METHODS)
    seed: int = option(int, 0, "seed for tuning, init and few-shot picks (default %(default)s)", range=SEED_RANGE,
                       sweep=False, group=METHODS)  # a sweep file lists `seeds`
    source: str = option(str, "offline", "offline (packaged data, the default), hub, or a path to a data file",
                         group=MODEL)
    include_path: str | None = option(str, None, "a folder of your own lm-eval task YAMLs, for --task lm-eval:NAME "
                                      "(docs/guide/lm-eval-tasks.md)", nullable=True, metavar="DIR", group=MODEL)
    out: str = option(str, "runs", "output root for run folders (default %(default)s)", sweep=False, group=OUTPUT)
    chat_template: str = option(str, "auto", "auto (default): on for post-trained models with a template, "
                                "never for base models", choices=CHAT_TEMPLATES, group=MODEL)
    kind: str | None = option(str, None, "model kind when it cannot be told from a preset or the name",
                              choices=KINDS, nullable=True, sweep=False, group=MODEL)
    eval_batch_size: int = option(int, 16, "scoring batch (default %(default)s)", range=(1, 65_536), group=ENGINE)
    device: str = option(str, "auto", "auto (the default: cuda when available), cpu, cuda, cuda:1 ...", group=ENGINE)
    dtype: str = option(str, "auto", "auto (the default: fp32 on CPU, bf16 on CUDA), float32, bfloat16, float16",
                        group=ENGINE)
    # the registry's backends (lm/backends.py) as they are when asked or shown, one registered later included
    backend: str = option(str, DEFAULT, backend_help, choices=NAMES, group=ENGINE)
    engine_args: dict | None = option(dict, None, "an argument of the backend's engine, e.g. tensor_parallel_size=2 "
                                      "for vllm (given once per argument); a sweep file's `engine_args:` mapping",
                                      nullable=True, metavar="KEY=VALUE", flag_name="--engine-arg", group=ENGINE)
    force: bool = option(bool, False, "replace finished runs instead of skipping them", sweep=False, group=OUTPUT)
    # another process is writing the same run: wait for it instead of exit 2
    wait: bool = option(bool, False, "when another process is writing the same run, wait for it "
                        "(default: exit 2 naming it)", group=OUTPUT)
    # the task's prompt in another format of the grammar (tasks/variants.py); 0: its own prompt
    prompt_variant: int = option(int, 0, "score the task's prompt written in format N of the prompt-variant grammar "
                                 "(default %(default)s: the task's own prompt; docs/guide/prompt-variants.md)",
                                 range=(0, 100_000), metavar="N", group=METHODS)
    # multiple choice: also score each item's letters in this many seeded option orders
    permutations: int = option(int, 0, "multiple choice: also score the option letters with the options in K "
                               "seeded orders (permutation_consistency, circular_accuracy); default off",
                               range=(0, 1_000), metavar="K", group=METHODS)
    # skip (and count in results.json) rows lacking a field or with a bad answer
    skip_bad_rows: bool = option(bool, False, "skip data rows that lack a field or whose answer is outside its "
                                 "options, and count them in results.json (default: stop with an error naming "
                                 "the file and row)", group=MODEL)
    steps: int = option(int, 80, "tuning steps (default %(default)s)", range=(1, 1_000_000), where=TUNING, group=TUNE)
    tokens: int = option(int, 10, "soft-prompt vectors (default %(default)s)", range=(1, 4_096), where=TUNING,
                         group=TUNE)
    lr: float = option(float, 3e-2, worked_help("AdamW learning rate (default %(default)s; {worked})", "lr"),
                       where=TUNING, by_target=True, group=TUNE)
    lr_schedule: str = option(str, "constant", worked_help("constant or linear: the learning rate falls linearly from "
                              "--lr to 0 over --steps (default %(default)s; {worked})", "lr_schedule"),
                              choices=LR_SCHEDULES, where=TUNING, by_target=True, group=TUNE)
    answer_share: float | None = option(float, None, worked_help("the share of the tuning loss given to each target's "
                                        "last line, the answer line (\"#### 42\"), the rest of the target the "
                                        "remainder, or none: every target token weighs the same (default %(default)s; "
                                        "{worked})", "answer_share"), range=(0.01, 0.99), nullable=True,
                                        where=TUNING, metavar="SHARE", by_target=True, group=ADVANCED)
    init: str = option(str, "vocab", worked_help("vocab, random, instruction (the task's own instruction), "
                       'text:"...", or from:PATH (warm start from a saved soft prompt: the soft_prompt/ folder of a '
                       "run); default "
                       "%(default)s, {worked}", "init"), where=TUNING, by_target=True, group=TUNE)
    batch_size: int = option(int, 8, "tuning batch (default %(default)s)", range=(1, 65_536), where=TUNING, group=TUNE)
    curve_every: int = option(int, 10, "learning-curve interval in steps (default %(default)s)",
                              range=(1, 1_000_000), where=TUNING, group=ADVANCED)
    curve_items: int = option(int, 16, "held-out tuning items per curve point (default %(default)s)",
                              range=(0, 1_000_000), where=TUNING, group=ADVANCED)
    length_group: int = option(int, 1, "regroup each window of this many tuning batches by length, less padding "
                               "(default 1: off)", range=(1, 1_000_000), where=TUNING, group=ADVANCED)
    tune_dtype: str = option(str, "auto", "the dtype of tuning's forward and backward: auto (the default: the "
                             "model's --dtype, what scoring computes in), float32 or bfloat16 (faster on CUDA or a "
                             "CPU with AMX, but bf16-tuned soft prompts scored worse in fp32: "
                             "docs/research/design.md); the soft prompt and its optimizer stay float32, scoring keeps "
                             "--dtype", choices=TUNE_DTYPES,
                             where=TUNING, group=ADVANCED)
    # stop tuning once the held-out slice follows the format and its loss and format plateau (tune.plateau)
    early_stop: bool = option(bool, True, "stop tuning at a curve point once the held-out slice follows the "
                              "format (format_rate >= 0.9) and its loss and format_rate have plateaued; the step "
                              "is recorded (default: %(default)s)",
                              where=TUNING, group=TUNE)
    # --method lora (lm/lora.py): a PEFT LoRA adapter tuned by the same loop, on the same items and steps
    epochs: float | None = option(float, None, "tune for this many passes over the tuning split instead of "
                                  "--steps (soft-prompt and lora; default: --steps)",
                                  nullable=True, where=TUNING, group=TUNE)
    lora_rank: int = option(int, 8, "lora: the adapter's rank r (default %(default)s)", range=(1, 4_096),
                            where=TUNING, group=LORA)
    lora_alpha: float = option(float, 16.0, "lora: its scale alpha, applied as alpha/r (default %(default)s)",
                               where=TUNING, group=LORA)
    lora_dropout: float = option(float, 0.0, "lora: dropout on the adapter's input while tuning "
                                 "(default %(default)s)", range=(0.0, 0.99), where=TUNING, group=ADVANCED)
    lora_lr: float = option(float, 2e-4, "lora: AdamW learning rate (default %(default)s; --lr is the soft "
                            "prompt's)", where=TUNING, group=LORA)
    lora_targets: str = option(str, ",".join(LORA_TARGETS), "lora: comma-separated names of the linear layers "
                               "that get an adapter, or all-linear (default %(default)s: the attention "
                               "projections)", where=TUNING, group=LORA)
    # score with a saved soft prompt instead of tuning
    soft_prompt: str | None = option(str, None, "folder of a saved soft prompt (PEFT adapter)", nullable=True,
                                     where=EVAL, sweep=False, group=METHODS)
    series: str | None = None  # the model is a checkpoint of this series (sweep/series.py) ...
    step: int | None = None  # ... at this training step

    def __post_init__(self) -> None:
        """A path given as a Path (library use) is the same option as its text; an option not given whose
        default depends on the task's kind of target takes the task's (``TARGET_DEFAULTS``)."""
        defaults = None  # the task's kind's defaults, looked up once (a task file is read for it)
        for key, row in OPTIONS.items():
            value = getattr(self, key)
            if row.type is str and isinstance(value, os.PathLike):
                setattr(self, key, os.fspath(value))
            elif value is BY_TARGET:
                from softeval.tasks import target_kind  # the task table: when a run is configured

                defaults = TARGET_DEFAULTS.get(target_kind(self.task), {}) if defaults is None else defaults
                setattr(self, key, defaults.get(key, row.default))

    def options(self, method: str, here: bool = True) -> dict:
        """Every option of the run of one method (results.json "config"); its identity is all of
        them but ``store.identity.NOT_IDENTITY``. ``here``: this machine runs it, so what ``auto`` options
        resolve to here is part of it (``store.identity.MACHINE_RESOLVED``: the tuning dtype)."""
        from softeval.lm.fingerprint import checkpoint_fingerprint  # these import torch: not with the table
        from softeval.lm.softprompt import init_identity
        from softeval.lm.tuning_loss import ANSWER_LINE_REVISION
        from softeval.tasks import builtin_revision
        from softeval.tasks.digest import data_file_sha256, task_file_sha256
        from softeval.tasks.lmeval_bridge import identity as lmeval_identity

        data = asdict(self)
        data["method"] = method
        data.pop("methods")
        if here:
            data[TUNE_DTYPE_RESOLVED] = resolved_tune_dtype(self)
        if self.soft_prompt:  # the path names a folder; what numbers come out depends on what is in it
            data["soft_prompt_sha256"] = folder_sha256(Path(self.soft_prompt))
        # what a task file and a data file hold, not only their names (tasks/digest.py)
        digests = {"task_sha256": task_file_sha256(self.task), "source_sha256": data_file_sha256(self.source)}
        data.update({key: digest for key, digest in digests.items() if digest is not None})
        revision = builtin_revision(self.task)
        if revision is not None and revision > 1:  # runs recorded before revisions existed ran revision 1
            data[TASK_REVISION] = revision
        data["init"] = init_identity(self.init)  # a warm start is its adapter's digest, not its path
        if data["prompt_variant"]:  # which grammar's format N is (a run of variant 0 is the task's own prompt)
            from softeval.tasks.variants import GRAMMAR_REVISION

            data[PROMPT_GRAMMAR] = GRAMMAR_REVISION
        else:
            data.pop("prompt_variant")  # the task's own prompt: as runs recorded before variants existed
        for name in ("epochs", "answer_share"):  # not given: as runs recorded before the option existed ran
            if data[name] is None:
                data.pop(name)
        if "answer_share" in data:  # what the share weighs (lm.tuning_loss.ANSWER_LINE_REVISION)
            data[ANSWER_LINE] = ANSWER_LINE_REVISION
        lm_eval = lmeval_identity(self.task, self.include_path)
        if lm_eval is not None:  # an lm-eval task is its YAML's content and lm-eval's version, not its name alone
            data[LM_EVAL] = lm_eval
        if self.series is not None:  # a checkpoint is what its folder holds, not where it lies (identity.FINGERPRINT)
            data[FINGERPRINT] = checkpoint_fingerprint(Path(self.model))
        return data


def resolved_tune_dtype(config: RunConfig) -> str:
    """The dtype tuning computes in for ``config`` on this machine (``--tune-dtype`` resolved: ``auto`` is
    the run's ``--dtype`` as the model loads in it on this machine's device), without loading the model;
    what tuning then uses (``TuneConfig.of``)."""
    from softeval.lm.models import pick_device, pick_dtype  # torch: when a run asks, not with the table
    from softeval.lm.precision import dtype_name, tuning_dtype

    return dtype_name(tuning_dtype(config.tune_dtype, pick_dtype(config.dtype, pick_device(config.device))))


def spelled(values: RunConfig | dict, keys=None) -> str:
    """Options as flags: ``--lr 0.3 --answer-share 0.5``; ``keys``: which of ``values`` (default: all)."""
    get = values.get if isinstance(values, dict) else lambda key: getattr(values, key)
    return " ".join(COMMAND_LINE.setting(key, "none" if get(key) is None else get(key)) for key in keys or values)


# The option table, in the order the command line lists the flags.
OPTIONS: dict[str, Option] = {f.name: Option(key=f.name, **f.metadata["option"])
                              for f in fields(RunConfig) if "option" in f.metadata}
SWEEP_OPTIONS: tuple[str, ...] = tuple(key for key, o in OPTIONS.items() if o.sweep)


def folder_sha256(folder: Path) -> str | None:
    """One sha256 over a folder's files (names and bytes, sorted); None when it is not a folder."""
    if not folder.is_dir():
        return None
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
