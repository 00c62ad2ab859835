"""soft-prompt: ~10 vectors tuned on the tuning split to put before the zero-shot prompt of a frozen model, so that
it writes the answer format; what softeval is about (docs/research/design.md)."""

from softeval.methods import (
    POOL_OPTIONS,
    SAVED_SOFT_PROMPT,
    SOFT_PROMPT,
    SOFT_PROMPT_OPTIONS,
    TREATMENT,
    TUNING_OPTIONS,
    MethodSpec,
    register,
)
from softeval.protocol import SOFT_PROMPT_FOLDER

SPEC = register(MethodSpec(
    name="soft-prompt", label="soft-prompt", colour="#2f7ebc", who="the soft prompt", role=TREATMENT,
    trains=SOFT_PROMPT, reads=(*TUNING_OPTIONS, *SOFT_PROMPT_OPTIONS, *SAVED_SOFT_PROMPT, *POOL_OPTIONS),
    folder=SOFT_PROMPT_FOLDER,
    advice="the soft prompt did not learn the format, so its scores are not format-free; try more --steps, another "
           "--lr, --init instruction or --init text:\"<the answer format>\", and where the targets are worked "
           "solutions {worked} (docs/reference/protocol.md, defaults by kind of target)"))
