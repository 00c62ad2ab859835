"""softeval: fair LLM benchmark evaluation by soft-prompt tuning.

Freeze a causal LM, tune a few soft-prompt vectors so it learns the benchmark's answer format, then
report format-following apart from knowledge, side by side with zero- and few-shot prompting.
"""

from softeval.errors import UserError
from softeval.lm.models import PRESETS, LoadedModel, load_model
from softeval.lm.softprompt import SoftPrompt, build_inputs
from softeval.tasks import TASKS, get_task
from softeval.version import __version__

__all__ = ["PRESETS", "TASKS", "LoadedModel", "SoftPrompt", "UserError", "build_inputs", "get_task",
           "load_model", "__version__"]
