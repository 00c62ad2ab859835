"""softeval: fair LLM benchmark evaluation by soft-prompt tuning.

Freeze a causal LM, tune a few soft-prompt vectors so it learns the benchmark's answer format, then
report format-following apart from knowledge, side by side with zero- and few-shot prompting.
The package's layers are described in docs/reference/architecture.md; this module re-exports the public API.

The names are imported when first used (``__getattr__``), not with the package: ``import softeval`` and
the command line's start (`softeval --help`, `softeval runs`) do not import torch, transformers or scipy.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from softeval.version import __version__

# Each public name and the module that defines it, imported on first use.
EXPORTS: dict[str, str] = {
    "UserError": "softeval.errors",
    "PRESETS": "softeval.lm.presets",
    "LoadedModel": "softeval.lm.models",
    "load_model": "softeval.lm.models",
    "SoftPrompt": "softeval.lm.softprompt",
    "layout_inputs": "softeval.lm.softprompt",
    "RunConfig": "softeval.run.config",
    "run_job": "softeval.run.pipeline",
    "TASKS": "softeval.tasks",
    "get_task": "softeval.tasks",
    "load_runs": "softeval.results",
    "load_samples": "softeval.results",
    "compare": "softeval.results",
}

__all__ = ["PRESETS", "TASKS", "LoadedModel", "RunConfig", "SoftPrompt", "UserError", "compare", "get_task",
           "layout_inputs", "load_model", "load_runs", "load_samples", "run_job", "__version__"]  # EXPORTS' names

if TYPE_CHECKING:  # what a type checker and an editor see: the same names, imported eagerly
    from softeval.errors import UserError
    from softeval.lm.models import LoadedModel, load_model
    from softeval.lm.presets import PRESETS
    from softeval.lm.softprompt import SoftPrompt, layout_inputs
    from softeval.results import compare, load_runs, load_samples
    from softeval.run.config import RunConfig
    from softeval.run.pipeline import run_job
    from softeval.tasks import TASKS, get_task


def __getattr__(name: str) -> Any:
    """A public name, imported from its module the first time it is asked for (then kept here)."""
    module = EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'softeval' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *EXPORTS})
