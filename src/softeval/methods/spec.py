"""A method's spec (``MethodSpec``) and the names it is written with: roles, the options only some methods read, the
rules a spec must keep (``check``). The registry (methods/__init__.py) and each built-in method's module import it;
it imports nothing of theirs."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# A method's role in the verdicts and the report (docs/reference/verdicts.md):
# - REFERENCE: the bare prompt; its run gives the format-free references (cloze, letter log-likelihood) and is what
#   a gain is measured from;
# - BASELINE: another way of prompting (shots) or of tuning before the prompt (a per-layer prefix), which a treatment
#   is compared with and which is itself compared with the reference when no treatment ran;
# - TREATMENT: what softeval is about (the soft prompt): tested item by item against the reference and each
#   baseline, and the one whose permutation scores the report shows;
# - ALTERNATIVE: scored and shown beside the others (its own curve, its own column), in no verdict pair.
REFERENCE, BASELINE, TREATMENT, ALTERNATIVE = "reference", "baseline", "treatment", "alternative"
ROLES = (REFERENCE, BASELINE, TREATMENT, ALTERNATIVE)

# The run options only some methods read (store/identity.py: an option a method does not read is not part of its
# identity, so new tuning settings leave a finished zero-shot run finished). Every option not named here is read by
# every method (tokens: the prompt budget beside a soft prompt; eval_batch_size; the task, the model...). A spec's
# ``reads`` names which of these it reads.
# TUNE_DTYPE_RESOLVED: --tune-dtype as the machine running the run resolves it; ANSWER_LINE: what the answer line
# that --answer-share weighs holds (store/identity.py says more of both).
TUNE_DTYPE_RESOLVED = "tune_dtype_resolved"
ANSWER_LINE = "answer_line"
TUNING_OPTIONS = ("steps", "epochs", "lr_schedule", "answer_share", ANSWER_LINE, "curve_every", "length_group",
                  "early_stop", "tune_dtype", TUNE_DTYPE_RESOLVED)
SOFT_PROMPT_OPTIONS = ("lr", "init")  # the soft prompt's own tuning settings
SAVED_PART = "soft_prompt"  # a saved part scored again without tuning (`softeval eval --soft-prompt`)
SAVED_SOFT_PROMPT = (SAVED_PART, "soft_prompt_sha256")  # the saved soft prompt and its digest (store/identity.py)
LORA_OPTIONS = ("lora_rank", "lora_alpha", "lora_dropout", "lora_lr", "lora_targets")
SHOT_OPTIONS = ("shots",)
# seed, batch_size and curve_items pick the held-out tuning items, hence the tuning pool and the shots
# (tests/run/test_zero_shot_reads.py)
POOL_OPTIONS = ("seed", "batch_size", "curve_items")
METHOD_OPTIONS = frozenset((*TUNING_OPTIONS, *SOFT_PROMPT_OPTIONS, *SAVED_SOFT_PROMPT, *LORA_OPTIONS, *SHOT_OPTIONS,
                            *POOL_OPTIONS))


@dataclass(frozen=True)
class MethodSpec:
    """One method. ``name``: what `--method` and results.json say; ``label``: how a table or legend shows it;
    ``colour``: its colour in the report's charts; ``who``: how a verdict names what the method puts before the
    model ("the soft prompt"); ``role``: ROLES; ``shots``: it puts the solved shots before
    each item; ``reads``: the METHOD_OPTIONS it reads; ``default``: scored when no method is named (and always
    given a column); ``part``: the ``"module:attr"`` of the maker of what it trains before it scores
    (methods/part.py; None: it trains nothing); ``folder``: the folder of a finished run that holds what it
    trained; ``advice``: what to try when its tuning never reached the format on the held-out slice, and
    ``recipe_advice`` instead when it had tuned with the defaults for worked solutions already (those are not news);
    ``frame``: a rewrite of each item's rendered question, the same in tuning and scoring (None: the task's own)."""

    name: str
    label: str
    colour: str
    who: str
    role: str
    part: str | None = None
    shots: bool = False
    reads: tuple[str, ...] = ()
    default: bool = True
    folder: str | None = None
    advice: str = ""
    recipe_advice: str = ""
    frame: Callable[[str], str] | None = None

    @property
    def tunes(self) -> bool:
        """It trains something on the tuning split before scoring (run/tuning_loop.py's one loop)."""
        return self.part is not None

    def reads_option(self, option: str) -> bool:
        """Whether a run of this method reads ``option``: every option but the METHOD_OPTIONS it does not name."""
        return option not in METHOD_OPTIONS or option in self.reads


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a method's name: one folder of a run's path, one item of --method
MAKER = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")  # a part maker's "module:attr"


def check(name: str, spec: object) -> MethodSpec:
    """The registry's check of what an entry names: a ``MethodSpec`` of the entry's ``name`` that keeps every rule;
    the spec, or why not (TypeError, ValueError)."""
    if not isinstance(spec, MethodSpec) or spec.name != name:
        raise TypeError(f"it names {spec!r}, not a MethodSpec named {name!r}")
    if not isinstance(spec.name, str) or not NAME.fullmatch(spec.name):
        raise ValueError(f"method name {spec.name!r}: a run folder and `--method a,b` hold it, so letters, digits, "
                         "'.', '_' and '-' only, starting with a letter or digit")
    bad = [o for o in spec.reads if o not in METHOD_OPTIONS]
    if bad:
        raise ValueError(f"method {spec.name!r} reads {bad}, which are not options only some methods read "
                         f"(methods.METHOD_OPTIONS); every other option is read by every method")
    if spec.role not in ROLES:
        raise ValueError(f"method {spec.name!r}: role must be one of {ROLES}")
    if spec.part is not None and (not isinstance(spec.part, str) or not MAKER.fullmatch(spec.part)):
        raise ValueError(f"method {spec.name!r}: part must name its maker as 'module:attr', not {spec.part!r}")
    if spec.tunes and spec.folder is None:
        raise ValueError(f"method {spec.name!r} trains a part: name the folder a finished run keeps it in")
    return spec
