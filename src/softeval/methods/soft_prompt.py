"""soft-prompt: ~10 vectors tuned on the tuning split to put before the zero-shot prompt of a frozen model, so that
it writes the answer format; what softeval is about (docs/research/design.md)."""

from softeval.constants import SOFT_PROMPT_FOLDER
from softeval.methods.spec import (
    POOL_OPTIONS,
    SAVED_SOFT_PROMPT,
    SOFT_PROMPT_OPTIONS,
    TREATMENT,
    TUNING_OPTIONS,
    MethodSpec,
)

# its advice when it already tuned with the defaults for worked solutions: those are not news
AFTER_THE_RECIPE = ("the soft prompt did not learn the format, so its scores are not format-free; it tuned with the "
                    "defaults for worked solutions already: try more --steps (or go on from it: --init "
                    "from:<its soft_prompt folder>), another --seed or --lr, or --init text:\"<the answer format>\" "
                    "(docs/reference/protocol.md, defaults by kind of target)")

SPEC = MethodSpec(
    name="soft-prompt", label="soft-prompt", colour="#2f7ebc", who="the soft prompt", role=TREATMENT,
    part="softeval.run.parts:SOFT_PROMPT",
    reads=(*TUNING_OPTIONS, *SOFT_PROMPT_OPTIONS, *SAVED_SOFT_PROMPT, *POOL_OPTIONS),
    folder=SOFT_PROMPT_FOLDER,
    advice="the soft prompt did not learn the format, so its scores are not format-free; try more --steps, another "
           "--lr, --init instruction or --init text:\"<the answer format>\", and where the targets are worked "
           "solutions {worked} (docs/reference/protocol.md, defaults by kind of target)",
    recipe_advice=AFTER_THE_RECIPE)
