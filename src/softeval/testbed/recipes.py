"""The pre-training recipes of `softeval testbed`: each varies knowledge (how many scored people the
corpus holds, how often, in how many paraphrases, the model's size, its steps) and, independently, format
exposure (QA text in the benchmark's format, over unscored people only, mixed into the corpus).

Two controls are named: ``never-saw`` (no scored person in its corpus: every method should stay at
chance) and ``format-little-knowledge`` (much QA text, few scored people: a method that ranks it high
rewards the format, not knowledge).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True)
class Recipe:
    name: str
    scored_share: float  # share of the scored people whose biographies are in the corpus
    exposures: int  # biographies per person in the corpus
    templates: int  # paraphrase templates per attribute (1: one fixed wording)
    qa_share: float  # QA documents (unscored people, the benchmark's format) per biography
    hidden: int = 128
    layers: int = 2
    epochs: float = 1.0  # passes over the corpus
    control: str | None = None  # "never-saw" or "format-little-knowledge"

    def to_json(self) -> dict:
        return asdict(self)


NEVER_SAW, FORMAT_LITTLE = "never-saw", "format-little-knowledge"
CONTROLS = (NEVER_SAW, FORMAT_LITTLE)

FULL = (
    Recipe("rich", 1.0, 120, 5, 0.0),
    Recipe("rich-format", 1.0, 120, 5, 0.2),
    Recipe("three-quarters", 0.75, 120, 5, 0.0),
    Recipe("half-format", 0.5, 120, 5, 0.1),
    Recipe("fixed-bio", 1.0, 120, 1, 0.0),
    Recipe("few-exposures", 1.0, 30, 5, 0.0),
    Recipe("small-model", 1.0, 120, 5, 0.0, hidden=64, layers=1),
    Recipe("quarter", 0.25, 120, 5, 0.0),
    Recipe("format-little-knowledge", 0.1, 120, 5, 0.5, control=FORMAT_LITTLE),
    Recipe("never-saw", 0.0, 120, 5, 0.0, control=NEVER_SAW),
)

# The quick mode's world is smaller (40 people): narrower models, three passes, so that they still learn facts.
QUICK = (
    Recipe("rich", 1.0, 100, 5, 0.0, hidden=64, epochs=3),
    Recipe("half-format", 0.5, 100, 5, 0.2, hidden=64, epochs=3),
    Recipe("format-little-knowledge", 0.1, 100, 5, 0.5, hidden=64, epochs=3, control=FORMAT_LITTLE),
    Recipe("never-saw", 0.0, 100, 5, 0.0, hidden=64, epochs=3, control=NEVER_SAW),
)


def recipes(quick: bool, scale: float = 1.0) -> tuple[Recipe, ...]:
    """The recipe list of a mode; ``scale`` multiplies every recipe's exposures (at least 1)."""
    chosen = QUICK if quick else FULL
    if scale == 1.0:
        return chosen
    return tuple(replace(r, exposures=max(1, round(r.exposures * scale))) for r in chosen)
