"""Every run option checked before anything is loaded or written: a bad value is one UserError that
names the option, so a refused command loads no model and leaves no run folder behind.

The ranges below are the rule (the CLI and library users share it, through ``pipeline.Job.prepare``).
Upper bounds are where a larger value would exhaust memory before doing anything useful, not taste.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from softeval.errors import UserError
from softeval.protocol import METHODS

# option -> (smallest, largest) allowed value
INT_RANGES: dict[str, tuple[int, int]] = {
    "limit": (1, 10**9),
    "steps": (1, 1_000_000),
    "shots": (0, 1_000),
    "tokens": (1, 4_096),
    "batch_size": (1, 65_536),
    "eval_batch_size": (1, 65_536),
    "curve_every": (1, 1_000_000),
    "curve_items": (0, 1_000_000),
    "length_group": (1, 1_000_000),
    "permutations": (0, 1_000),
    "seed": (-(2**63), 2**63 - 1),
}
_DEVICE = re.compile(r"auto|cpu|mps|cuda(?::(\d{1,3}))?")


def option(key: str) -> str:
    return "--" + key.replace("_", "-")


def check_int(key: str, value) -> None:
    low, high = INT_RANGES[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"{option(key)} must be a whole number, not {value!r}")
    if not low <= value <= high:
        raise UserError(f"{option(key)} must be between {low} and {high}, not {value}"
                        if key != "seed" else f"--seed must fit in 64 bits, not {value}")


def is_whole(value) -> bool:
    """An int that is not a bool (``True`` is an int to isinstance, and JSON's true reads as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    """An int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_lr(value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UserError(f"--lr must be a positive finite number, not {value!r}")


def check_init(value: str, tokens: int | None = None, model: str | None = None) -> None:
    """``from:PATH`` must name a saved soft prompt (the soft_prompt/ folder of a run) with ``tokens``
    vectors, of ``model``'s hidden size where that is known before loading (``check_width``); else it
    is checked once the model is loaded (softprompt.initialise)."""
    from softeval.lm.softprompt import init_source

    if value in ("vocab", "random"):
        return
    if isinstance(value, str) and value.startswith("text:") and value[5:].strip().strip('"'):
        return
    source = init_source(value)
    if source is not None and str(source):
        if not source.is_dir():
            raise UserError(f"--init {value}: no such folder (give the soft_prompt/ folder of a soft-prompt run)")
        shape = check_adapter(f"--init {value}", source)
        if tokens is not None and shape[0] != tokens:
            raise UserError(f"--init {value}: that soft prompt has {shape[0]} virtual tokens, the run asks for "
                            f"--tokens {tokens}: pass --tokens {shape[0]}")
        if model is not None:
            check_width(f"--init {value}", shape, model)
        return
    raise UserError(f'--init must be vocab, random, text:"some words" or from:PATH (a saved soft prompt), '
                    f"not {value!r}")


def check_adapter(what: str, folder: Path) -> tuple[int, ...]:
    """The shape of the saved soft prompt in ``folder`` (read from its header, no model needed): a
    UserError naming ``what`` when it is unreadable or not [num_virtual_tokens, hidden_size]. Its
    hidden size is checked against the model once it is loaded (SoftPrompt.load)."""
    from softeval.lm.softprompt import adapter_shape

    shape = adapter_shape(folder)
    if len(shape) != 2 or shape[0] < 1:
        raise UserError(f"{what}: its prompt_embeddings have shape {shape}, not [num_virtual_tokens, hidden_size]")
    return shape


def check_device(device: str) -> None:
    """A device torch understands and this machine has: ``cuda`` without CUDA is refused here, not after
    the data has been read and the model is half loaded."""
    found = _DEVICE.fullmatch(device) if isinstance(device, str) else None
    if not found:
        raise UserError(f"unknown --device {device!r}: use auto, cpu, cuda, cuda:N or mps")
    import torch

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
            raise UserError(f"--device {device}: {why}; use --device cpu (or auto)")
        index = int(found.group(1) or 0)
        if index >= torch.cuda.device_count():
            raise UserError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here "
                            f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})")
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise UserError("--device mps: no Apple GPU (MPS) is available here; use --device cpu (or auto)")


def check_out(out: str) -> None:
    """The output root must be a folder (or not exist yet) under folders this user can write."""
    if not isinstance(out, str) or not out.strip():
        raise UserError("--out must name a folder")
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UserError(f"--out {out} is a file, not a folder: give a folder for the run folders")
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise UserError(f"--out {out}: {parent} is a file, not a folder")
            break
    existing = next(p for p in (path.absolute(), *path.absolute().parents) if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--out {out}: cannot write under {existing} (permission denied)")


def is_data_file(source: str) -> bool:
    """Whether a --source names a local data file (anything but offline, hub and hub:CONFIG)."""
    return source not in ("offline", "hub") and not source.startswith("hub:")


def check_config(cfg, model_given: bool = False) -> None:
    """Every option of a ``pipeline.RunConfig``; the first bad one is a UserError. ``model_given``: the
    caller passes a loaded model, so ``cfg.model`` is only a label."""
    from softeval.lm.models import check_model_name, pick_dtype

    if not cfg.methods:
        raise UserError(f"no method given: use one or more of {', '.join(METHODS)}")
    for method in cfg.methods:
        if method not in METHODS:
            raise UserError(f"unknown method {method!r}: use {', '.join(METHODS)}")
    if len(set(cfg.methods)) != len(cfg.methods):
        raise UserError(f"a method is given twice in {','.join(cfg.methods)}")
    for key in INT_RANGES:
        value = getattr(cfg, key)
        if value is not None or key != "limit":
            check_int(key, value)
    check_lr(cfg.lr)
    check_init(cfg.init, cfg.tokens, None if model_given else cfg.model)
    if cfg.chat_template not in ("auto", "on", "off"):
        raise UserError(f"unknown --chat-template {cfg.chat_template!r}: use auto, on or off")
    if cfg.kind not in (None, "base", "post-trained"):
        raise UserError(f"unknown --kind {cfg.kind!r}: use base or post-trained")
    if not isinstance(cfg.source, str) or not cfg.source.strip():
        raise UserError("--source must be offline, hub or a data file")
    if is_data_file(cfg.source) and not Path(cfg.source).is_file():
        raise UserError(f"--source {cfg.source}: data file not found (give offline, hub or a data file)")
    check_device(cfg.device)
    pick_dtype(cfg.dtype, "cpu")  # raises on an unknown name; the device-dependent choice comes at load
    check_out(cfg.out)
    if not model_given:
        check_model_name(cfg.model)
    if cfg.series is not None and (not isinstance(cfg.series, str) or not cfg.series.strip()):
        raise UserError(f"a series must have a name, not {cfg.series!r}")
    if cfg.step is not None and (isinstance(cfg.step, bool) or not isinstance(cfg.step, int) or cfg.step < 0):
        raise UserError(f"a checkpoint's step must be a whole number >= 0, not {cfg.step!r}")
    if cfg.soft_prompt is not None:
        if not Path(cfg.soft_prompt).is_dir():
            raise UserError(f"--soft-prompt {cfg.soft_prompt}: no such folder (give the folder of a saved soft prompt)")
        shape = check_adapter(f"--soft-prompt {cfg.soft_prompt}", Path(cfg.soft_prompt))
        if not model_given:
            check_width(f"--soft-prompt {cfg.soft_prompt}", shape, cfg.model)


def check_width(what: str, shape: tuple[int, ...], model: str) -> None:
    """A saved soft prompt's vectors must have the model's hidden size: refused here, before the model
    loads, where the size can be read from the model's files (``hidden_size_before_loading``); else
    once it is loaded (``SoftPrompt.load``)."""
    from softeval.lm.models import hidden_size_before_loading

    hidden = hidden_size_before_loading(model)
    if hidden is not None and shape[1] != hidden:
        raise UserError(f"{what}: its vectors have {shape[1]} dimensions, model {model} has hidden size {hidden}: "
                        "it was tuned for another model")
