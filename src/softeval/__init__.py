"""softeval: fair LLM benchmark evaluation by soft-prompt tuning.

Freeze a causal LM, tune a few soft-prompt vectors so it learns the benchmark's answer format, then
report format-following apart from knowledge, side by side with zero- and few-shot prompting.
"""

__version__ = "0.1.0"

from softeval.errors import UserError  # noqa: E402
from softeval.lm.models import PRESETS, LoadedModel, load_model  # noqa: E402
from softeval.lm.softprompt import SoftPrompt, layout_inputs  # noqa: E402
from softeval.tasks import TASKS, get_task  # noqa: E402

__all__ = ["PRESETS", "TASKS", "LoadedModel", "SoftPrompt", "UserError", "get_task", "layout_inputs",
           "load_model", "__version__"]
