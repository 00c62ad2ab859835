"""What the analysis commands' options may name (`softeval compare` and `report`: --metric, --post-method),
apart from the statistics that use them (analysis/compare.py imports numpy and scipy), so that the command
line builds its parser without those."""

from __future__ import annotations

from softeval.methods import names as method_names
from softeval.methods import reference as reference_method

# the options' choices; reference_method: the default --post-method, the bare prompt (how post-trained models are used)
__all__ = ["PER_ITEM", "post_methods", "reference_method"]

# Each metric as (per-item numerator field, per-item denominator field or None for "every item").
PER_ITEM: dict[str, tuple[str, str | None]] = {
    "accuracy": ("correct", None),
    "lenient_accuracy": ("lenient_correct", None),
    "format_rate": ("format_ok", None),
    "letter_loglik_accuracy": ("letter_loglik_correct", None),
    "cloze_accuracy": ("cloze_correct", None),
    "cloze_accuracy_norm": ("cloze_norm_correct", None),
    "circular_accuracy": ("circular_correct", None),
    "knowledge_accuracy": ("correct", "format_ok"),  # a ratio: correct among format-following items
}


def post_methods() -> tuple[str, ...]:
    """What --post-method may name: a registered method, or "best" (each post-trained model by its best one)."""
    return (*method_names(), "best")
