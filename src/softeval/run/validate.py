"""Every run option checked before anything is loaded or written: a bad value is one UserError that
names the option as the user wrote it (``--steps`` on the command line, ``'steps'`` in a sweep file:
``Spelling``), so a refused command loads no model and leaves no run folder behind.

The ranges and choices are the option table's (run/config.py); the CLI, sweep files and library users
share these checks through ``pipeline.Job.prepare`` and ``sweep.file``. Upper bounds are where a larger
value would exhaust memory before doing anything useful, not taste.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from pathlib import Path

import torch

from softeval.checks import is_data_file, is_number, is_whole
from softeval.errors import UserError, shown
from softeval.lm import backends
from softeval.lm.engine import HF
from softeval.lm.lora import ALL_LINEAR, LORA_TARGETS, parse_targets, peft_module
from softeval.lm.models import check_model_name, hidden_size_before_loading, pick_device, pick_dtype
from softeval.lm.softprompt import (
    INIT_GRAMMAR,
    NO_TOKENS,
    OTHER_TOKENS,
    InitRefused,
    adapter_shape,
    check_warm_start,
    init_used,
    parse_init,
)
from softeval.methods import known, maker_of, names, spec_of
from softeval.run.config import COMMAND_LINE, OPTIONS, SEED_RANGE, RunConfig, Spelling
from softeval.store.format import run_folder_around, write_refusal
from softeval.tasks.data import file_problem
from softeval.tasks.lmeval_bridge import is_lmeval

DEVICE = re.compile(r"auto|cpu|mps|cuda(?::(\d{1,3}))?")  # the device names torch understands


TYPE_NAMES = {int: "a whole number", float: "a number", str: "text", bool: "true or false",
              dict: "a mapping of names to values"}


def check_type(key: str, value, spelling: Spelling = COMMAND_LINE) -> None:
    """One option's value has its row's type (a whole number is a number; true is neither), or is None
    where the row allows it. A sweep file's values are typed by it before they become a RunConfig."""
    row = OPTIONS[key]
    if value is None and row.nullable:
        return
    typed = is_whole(value) if row.type is int else is_number(value) if row.type is float \
        else isinstance(value, row.type)  # str or bool: "no" is not false, true is not text
    if not typed:
        null = " or null" if row.nullable and not spelling.command_line else ""
        raise UserError(f"{spelling.key(key)} must be {TYPE_NAMES[row.type]}{null}, not {type(value).__name__} "
                        f"{shown(value)}")


def _check_whole(key: str, value: int, low: int, high: int, spelling: Spelling) -> None:
    if not low <= value <= high:
        raise UserError(f"{spelling.key(key)} must fit in 64 bits, not {value}" if (low, high) == SEED_RANGE
                        else f"{spelling.key(key)} must be between {low} and {high}, not {value}")


def _check_number(key: str, value: float, limits: tuple[float, float] | None, spelling: Spelling) -> None:
    """A number within its row's range, or where the row has none a positive one; finite either way."""
    if limits is None:
        if not math.isfinite(value) or value <= 0:
            raise UserError(f"{spelling.key(key)} must be a positive finite number, not {shown(value)}")
        return
    low, high = limits
    if not math.isfinite(value) or not low <= value <= high:
        raise UserError(f"{spelling.key(key)} must be between {low:g} and {high:g}, not {shown(value)}")


def _check_mapping(key: str, value: dict, spelling: Spelling) -> None:
    """Argument names to text, numbers or true/false (``--engine-arg``)."""
    for k, v in value.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise UserError(f"{spelling.key(key)}: {shown(k)} is not an argument spelling")
        if not isinstance(v, (str, int, float, bool)):
            raise UserError(f"{spelling.key(key)}: {k} must be text, a number or true/false, not "
                            f"{type(v).__name__} {shown(v)}")


def _check_choice(key: str, value, choices, spelling: Spelling) -> None:
    if value not in choices:
        known = tuple(choices)
        listed = ", ".join(known[:-1]) + " or " + known[-1]
        raise UserError(f"unknown {spelling.key(key)} {shown(value)}: use {listed}")


def check_option(key: str, value, spelling: Spelling = COMMAND_LINE) -> None:
    """One option's value against its row of the table: its type (``check_type``), range and choices."""
    check_type(key, value, spelling)
    row = OPTIONS[key]
    if value is None:
        return
    if row.type is int:
        _check_whole(key, value, *row.range, spelling)
    elif row.type is float:
        _check_number(key, value, row.range, spelling)
    elif row.type is dict:
        _check_mapping(key, value, spelling)
    elif row.choices is not None:
        _check_choice(key, value, row.choices, spelling)


def check_methods(methods, spelling: Spelling = COMMAND_LINE) -> None:
    """The methods of a run: one or more of the registry's (softeval.methods), each once. Only the library can give
    them as something else than a list (the command line and a sweep file make one), so that error names
    RunConfig's field."""
    if isinstance(methods, str) or not isinstance(methods, (list, tuple)):
        example = f"methods=({shown(methods)},)" if known(methods) else f"methods={names()!r}"
        raise UserError(f"RunConfig's methods is a list or tuple of methods, not {type(methods).__name__} "
                        f"{shown(methods)}: e.g. {example}")
    if not methods:
        raise UserError(f"no method given: use one or more of {', '.join(names())}")
    for method in methods:
        spec_of(method)  # an unknown one is refused, naming those there are
    if len(set(methods)) != len(methods):
        raise UserError(f"a method is given twice in {','.join(methods)}")


def _check_data(cfg: RunConfig, spelling: Spelling) -> None:
    """Where the task's data comes from: offline, hub or a data file there is; ``include_path`` for lm-eval
    tasks only."""
    if not isinstance(cfg.source, str) or not cfg.source.strip():
        raise UserError(f"{spelling.key('source')} must be offline, hub or a data file")
    if is_data_file(cfg.source) and (problem := file_problem(cfg.source)):
        said = ": data file not found" if problem == "not found" else f" {problem}"
        raise UserError(f"{spelling.setting('source', cfg.source)}{said} (give offline, hub or a data file)")
    if cfg.include_path is not None and not is_lmeval(cfg.task):
        raise UserError(f"{spelling.setting('include_path', cfg.include_path)} is for lm-eval tasks: give --task "
                        "lm-eval:NAME, or leave it out")


def _check_series(cfg: RunConfig, spelling: Spelling) -> None:
    """A checkpoint of a series: the series' name and the checkpoint's step."""
    if cfg.series is not None and (not isinstance(cfg.series, str) or not cfg.series.strip()):
        raise UserError(f"a series must have a name, not {shown(cfg.series)}")
    if cfg.step is not None and (not is_whole(cfg.step) or cfg.step < 0):
        raise UserError(f"a checkpoint's step must be a whole number >= 0, not {shown(cfg.step)}")


def _check_soft_prompt(cfg: RunConfig, model_given: bool, spelling: Spelling) -> None:
    """A saved soft prompt to score (``--soft-prompt``): a soft prompt's folder, of the model's width where that is
    known before loading."""
    if cfg.soft_prompt is None:
        return
    given = spelling.setting("soft_prompt", cfg.soft_prompt)
    shape = check_adapter(given, Path(cfg.soft_prompt), "the folder of a saved soft prompt")
    if not model_given:
        check_width(given, shape, cfg.model)


def check_config(cfg: RunConfig, model_given: bool = False, spelling: Spelling = COMMAND_LINE,
                 on_worker: tuple[str, ...] = ()) -> None:
    """Every option of a RunConfig; the first bad one is a UserError. ``model_given``: the caller passes
    a loaded model, so ``cfg.model`` is only a label. ``on_worker``: options checked where the run
    runs, not here (a sweep's driver checks only the device's name and leaves ``out`` to each worker, and
    on a cluster leaves the ``backend``'s checks on the device to them)."""
    check_methods(cfg.methods, spelling)
    for key in OPTIONS:
        check_option(key, getattr(cfg, key), spelling)
    for method in cfg.methods:  # what each method's trained part needs (methods/part.py: PartMaker.check)
        maker = maker_of(method)
        if maker is not None:
            maker.check(cfg, spelling)
    check_init(cfg.init, cfg.tokens, None if model_given else cfg.model, spelling)
    _check_data(cfg, spelling)
    check_device(cfg.device, spelling, exists="device" not in on_worker)
    pick_dtype(cfg.dtype, "cpu")  # raises on an unknown name; the device-dependent choice comes at load
    if "out" not in on_worker:
        check_out(cfg.out, spelling)
    if not model_given:
        check_model_name(cfg.model)
    check_backend(cfg, spelling, on_device="backend" not in on_worker)
    _check_series(cfg, spelling)
    _check_soft_prompt(cfg, model_given, spelling)


def check_lora(cfg: RunConfig, spelling: Spelling = COMMAND_LINE) -> None:
    """What a lora run needs before anything loads: peft installed (the peft extra) and at least one target
    layer named; a name no layer of the model has is refused once the model is loaded (lm.lora)."""
    peft_module()
    if not parse_targets(cfg.lora_targets):
        raise UserError(f"{spelling.key('lora_targets')} must spelling at least one linear layer (e.g. "
                        f"{','.join(LORA_TARGETS)}) or be {ALL_LINEAR}")


def check_backend(cfg: RunConfig, spelling: Spelling = COMMAND_LINE, on_device: bool = True) -> None:
    """Engine arguments only for a backend that reads them (``--engine-arg`` with ``--backend vllm``);
    then the backend's own checks (``backends.Backend.check``; vLLM: a model it can load, vLLM installed
    for the device and knowing every engine argument), on the device the run runs on with ``on_device``,
    else (a sweep's driver) what can be checked away from it."""
    chosen = backends.backend(cfg.backend)
    for method in cfg.methods:
        maker = maker_of(method)
        if maker is not None and maker.enters not in chosen.parts:
            raise UserError(f"{spelling.setting('backend', cfg.backend)} cannot score method {method}: its engine does "
                            f"not read the {maker.what} put into the transformers model ({maker.enters}); run "
                            f"{method} with {spelling.setting('backend', HF)}")
    if cfg.engine_args and not chosen.takes_args:
        takers = " or ".join(spelling.setting("backend", n) for n, b in backends.described().items()
                             if b and b.takes_args)
        fix = f"add {takers}, or leave it out" if takers else "leave it out"
        raise UserError(f"{spelling.key('engine_args')} sets a backend's engine, and "
                        f"{spelling.setting('backend', cfg.backend)} takes no engine arguments: {fix}")
    chosen.checked(cfg.model, pick_device(cfg.device) if on_device else None, cfg.engine_args, spelling)


def check_init(value: str, tokens: int | None = None, model: str | None = None,
               spelling: Spelling = COMMAND_LINE) -> None:
    """``value`` in the init grammar (``softprompt.parse_init``); ``from:PATH`` must name a saved soft
    prompt (the soft_prompt/ folder of a run) with ``tokens`` vectors, of ``model``'s hidden size where
    that is known before loading (``check_width``); else it is checked once the model is loaded
    (softprompt.initialise)."""
    try:
        source = parse_init(value).source
        if source is None:
            return
        given = spelling.setting("init", value)
        shape = check_adapter(given, source, "the soft_prompt/ folder of a soft-prompt run")
        if tokens is not None:
            check_warm_start(value, shape[0], tokens)
    except InitRefused as refused:
        raise init_refusal(refused, spelling) from None
    if model is not None:
        check_width(given, shape, model)


def init_refusal(refused: InitRefused, spelling: Spelling = COMMAND_LINE) -> UserError:
    """An init the lm layer refused (``softprompt.InitRefused``), said with the options as the user
    wrote them (``--init``/``--tokens`` on the command line, ``init:``/``tokens:`` in a sweep file)."""
    value = refused.value
    if refused.problem == OTHER_TOKENS:
        return UserError(f"{spelling.setting('init', value)}: that soft prompt has {refused.found} virtual tokens, "
                         f"the run asks for {spelling.setting('tokens', refused.asked)}: pass "
                         f"{spelling.setting('tokens', refused.found)}")
    if refused.problem == NO_TOKENS:
        return UserError(f"{spelling.setting('init', value)}: the text has no tokens for this model; give other "
                         "words")
    return UserError(f"{spelling.key('init')} must be {INIT_GRAMMAR}, not {shown(value)}")


def check_adapter(what: str, folder: Path, give: str) -> tuple[int, ...]:
    """The shape of the saved soft prompt in ``folder`` (read from its header, no model needed): a
    UserError naming ``what`` (the option as the user wrote it) when ``folder`` is no folder (saying
    to ``give`` one), or its soft prompt is unreadable or not [num_virtual_tokens, hidden_size]. Its
    hidden size is checked against the model where known before loading (``check_width``), else once
    it is loaded (SoftPrompt.load)."""
    if not folder.is_dir():
        raise UserError(f"{what}: no such folder (give {give})")
    shape = adapter_shape(folder)
    if len(shape) != 2 or shape[0] < 1:
        raise UserError(f"{what}: its prompt_embeddings have shape {shape}, not [num_virtual_tokens, hidden_size]")
    return shape


def check_width(what: str, shape: tuple[int, ...], model: str) -> None:
    """A saved soft prompt's vectors must have the model's hidden size: refused here, before the model
    loads, where the size can be read from the model's files (``hidden_size_before_loading``); else
    once it is loaded (``SoftPrompt.load``)."""
    hidden = hidden_size_before_loading(model)
    if hidden is not None and shape[1] != hidden:
        raise UserError(f"{what}: its vectors have {shape[1]} dimensions, model {model} has hidden size {hidden}: "
                        "it was tuned for another model")


def check_device(device: str, spelling: Spelling = COMMAND_LINE, exists: bool = True) -> None:
    """A device torch understands and, with ``exists``, this machine has: ``cuda`` without CUDA is
    refused here, not after the data has been read and the model is half loaded."""
    found = DEVICE.fullmatch(device) if isinstance(device, str) else None
    if not found:
        raise UserError(f"unknown {spelling.key('device')} {shown(device)}: use auto, cpu, cuda, cuda:N or mps")
    if not exists:
        return
    given, cpu = spelling.setting("device", device), spelling.setting("device", "cpu")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
            raise UserError(f"{given}: {why}; use {cpu} (or auto)")
        index = int(found.group(1) or 0)
        if index >= torch.cuda.device_count():
            raise UserError(f"{given}: only {torch.cuda.device_count()} CUDA device(s) here "
                            f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})")
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise UserError(f"{given}: no Apple GPU (MPS) is available here; use {cpu} (or auto)")


def check_out(out: str, spelling: Spelling = COMMAND_LINE) -> None:
    """The output root must be a folder (or not exist yet) under folders this user can write, and not
    inside a run folder (store.format.run_folder_around)."""
    if not isinstance(out, str) or not out.strip():
        raise UserError(f"{spelling.key('out')} must spelling a folder")
    path = Path(out)
    given = spelling.setting("out", out)
    if path.exists() and not path.is_dir():
        raise UserError(f"{given} is a file, not a folder: give a folder for the run folders")
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise UserError(f"{given}: {parent} is a file, not a folder")
            break
    existing = next(p for p in (path.absolute(), *path.absolute().parents) if p.exists())
    run = run_folder_around(existing.resolve())
    if run is not None:
        root = f", such as the one that holds it ({run.parents[3]})" if len(run.parents) > 3 else ""
        raise UserError(f"{given} is inside a run folder ({run}): give an output root outside it{root}")
    why = write_refusal(existing)
    if why:
        raise UserError(f"{given}: cannot write under {existing} ({why})")


def unused_note(cfg: RunConfig, given: Collection[str], multiple_choice: bool,
                spelling: Spelling = COMMAND_LINE, runs: str = "this run") -> str | None:
    """The one line naming the options ``given`` (the keys the user set) that the run of ``cfg`` does not use, or
    None: those no method of the run reads (each spec's ``reads``: softeval.methods, the rule the run's identity
    follows) and ``permutations`` on a task that is not ``multiple_choice`` (it reorders the options of
    multiple-choice items: ``Job.prepare`` and ``score_items`` read it only there). ``runs``: what it has no effect
    on (a sweep's note: "its runs")."""
    unread = [k for k in OPTIONS if k in given and not any(spec_of(m).reads_option(k) for m in cfg.methods)]
    unpermuted = "permutations" in given and not multiple_choice and "permutations" not in unread
    unused = unread + ["permutations"] * unpermuted
    if not unused:
        return None

    def keys(found: list[str]) -> str:
        return ", ".join(spelling.key(k) for k in found)

    why = []
    if unread:
        why.append(f"{keys(unread)}: not read by method{'s' * (len(cfg.methods) > 1)} {', '.join(cfg.methods)}")
    if unpermuted:
        why.append(f"{spelling.key('permutations')}: task {cfg.task} is not multiple choice")
    return f"note: {keys(unused)} {'has' if len(unused) == 1 else 'have'} no effect on {runs} ({'; '.join(why)})"


def init_note(cfg: RunConfig, instruction: str | None, spelling: Spelling = COMMAND_LINE) -> str | None:
    """The one line saying what ``--init instruction`` starts from on a task without an instruction (vocab tokens:
    ``softprompt.init_used``, what results.json's ``tuning.init`` then records), where a method of the run tunes a
    soft prompt from its init; else None."""
    used = init_used(cfg.init, instruction)
    tuned = cfg.soft_prompt is None and any(spec_of(m).tunes and spec_of(m).reads_option("init") for m in cfg.methods)
    if not tuned or used == cfg.init:
        return None
    return (f"note: {spelling.setting('init', cfg.init)}: task {cfg.task} has no instruction, so the soft prompt "
            f"starts from {used} (results.json's tuning.init says {used})")
