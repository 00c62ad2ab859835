"""softeval: fair LLM benchmark evaluation by soft-prompt tuning.

Freeze a causal LM, tune a few soft-prompt vectors so it learns the benchmark's answer format, then
report format-following apart from knowledge, side by side with zero- and few-shot prompting.
The package's layers are described in docs/architecture.md; this module re-exports the public API.
"""

from softeval.errors import UserError
from softeval.lm.models import PRESETS, LoadedModel, load_model
from softeval.lm.softprompt import SoftPrompt, layout_inputs
from softeval.run.config import RunConfig
from softeval.run.pipeline import run_job
from softeval.tasks import TASKS, get_task
from softeval.version import __version__

__all__ = ["PRESETS", "TASKS", "LoadedModel", "RunConfig", "SoftPrompt", "UserError", "get_task", "layout_inputs",
           "load_model", "run_job", "__version__"]
