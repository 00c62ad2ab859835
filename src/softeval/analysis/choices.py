"""What the analysis commands' options may name (`softeval compare` and `report`: --post-method; --metric's
choices are softeval.metrics.COMPARED), apart from the statistics that use them (analysis/compare.py imports numpy
and scipy), so that the command line builds its parser without those."""

from __future__ import annotations

from softeval.methods import names as method_names
from softeval.methods import reference as reference_method

# the option's choices; reference_method: the default --post-method, the bare prompt (how post-trained models are used)
__all__ = ["post_methods", "reference_method"]


def post_methods() -> tuple[str, ...]:
    """What --post-method may name: a registered method, or "best" (each post-trained model by its best one)."""
    return (*method_names(), "best")
