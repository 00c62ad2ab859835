"""The methods a run scores with, one spec each (``MethodSpec``), registered by name: the one place that says
what a method trains (its part's maker: methods/part.py), whether it takes shots, which options it reads (and so
which enter its run's identity), how tables and charts show it and what role it plays in the verdicts. Every other
module asks the registry; none names a method (docs/reference/architecture.md, "Adding a method").

The built-in methods are one module each beside this one (``zero_shot``, ``few_shot``, ``soft_prompt``, ``lora``);
another distribution adds one through the entry-point group ``softeval.methods`` (its value
names a ``MethodSpec``), and a program or a test by ``register``. A spec names its trained part's maker as a lazy
``"module:attr"`` (``maker_of`` imports it when a run needs it), so this package is data only, imported by every
layer, and imports nothing heavy.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata

from softeval.errors import UserError, shown
from softeval.methods.part import PartMaker

ENTRY_POINTS = "softeval.methods"

# A method's role in the verdicts and the report (docs/reference/verdicts.md):
# - REFERENCE: the bare prompt; its run gives the format-free references (cloze, letter log-likelihood) and is what
#   a gain is measured from;
# - BASELINE: another way of prompting (shots), which a treatment is compared with and which is itself compared
#   with the reference when no treatment ran;
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
        """It trains something on the tuning split before scoring (run/tune.py's one loop)."""
        return self.part is not None

    def reads_option(self, option: str) -> bool:
        """Whether a run of this method reads ``option``: every option but the METHOD_OPTIONS it does not name."""
        return option not in METHOD_OPTIONS or option in self.reads


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a method's name: one folder of a run's path, one item of --method
MAKER = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")  # a part maker's "module:attr"
_REGISTRY: dict[str, MethodSpec] = {}
_BROKEN: dict[str, str] = {}  # an entry point that did not load: why, said when its method is chosen
_loaded = False


def register(spec: MethodSpec, replace: bool = False) -> MethodSpec:
    """Add ``spec`` to the registry (``replace``: over a method of the same name, for tests); returns it."""
    _check(spec)
    if spec.name in _REGISTRY and not replace and _REGISTRY[spec.name] != spec:
        raise ValueError(f"method {spec.name!r} is registered already")
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove a method (a test's own, after the test)."""
    _REGISTRY.pop(name, None)


def _check(spec: MethodSpec) -> None:
    if not isinstance(spec, MethodSpec):
        raise TypeError(f"not a MethodSpec: {spec!r}")
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


def _load() -> None:
    """The built-in methods, then those other distributions register by entry point (once per process)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    # here, not at the top: each imports this module to register itself
    from softeval.methods import few_shot, lora, prefix_tuning, soft_prompt, zero_shot

    # the built-ins first, in the order tables show them (imports register in import order, which isort sorts)
    first = {s.name: s for s in (zero_shot.SPEC, few_shot.SPEC, soft_prompt.SPEC, lora.SPEC, prefix_tuning.SPEC)}
    rest = {name: spec for name, spec in _REGISTRY.items() if name not in first}
    _REGISTRY.clear()
    _REGISTRY.update({**first, **rest})

    for entry in metadata.entry_points(group=ENTRY_POINTS):
        if entry.name not in _REGISTRY:  # a built-in's name stays the built-in's
            _load_entry(entry)


def _load_entry(entry: metadata.EntryPoint) -> None:
    """Register the spec another package's entry point names; one that does not load (or names no spec of its own
    name) is kept as why, said when its method is chosen (``spec_of``), so a broken package breaks no other run."""
    try:
        spec = entry.load()
        if not isinstance(spec, MethodSpec) or spec.name != entry.name:
            raise TypeError(f"it names {spec!r}, not a MethodSpec named {entry.name!r}")
        register(spec)
    except Exception as err:  # noqa: BLE001 (another package's code: any failure is said when it is chosen)
        dist = entry.dist.name if entry.dist is not None else "an installed package"
        why = str(err).strip().splitlines()[0] if str(err).strip() else ""
        _BROKEN[entry.name] = (f"method {entry.name} ({ENTRY_POINTS} entry point {entry.value} of {dist}) does not "
                               f"load: {type(err).__name__}: {why}")


def specs() -> tuple[MethodSpec, ...]:
    """Every registered method, built-ins first, in the order tables show them."""
    _load()
    return tuple(_REGISTRY.values())


def names() -> tuple[str, ...]:
    """Every method's name, in the order tables show them."""
    return tuple(s.name for s in specs())


def default_names() -> tuple[str, ...]:
    """What a run scores when no method is named."""
    return tuple(s.name for s in specs() if s.default)


def tuned_names() -> tuple[str, ...]:
    """The methods that train something before they score."""
    return tuple(s.name for s in specs() if s.tunes)


def with_role(role: str) -> tuple[str, ...]:
    """The methods of ``role``, in table order."""
    return tuple(s.name for s in specs() if s.role == role)


def scoring_saved() -> str | None:
    """The method that scores a saved part without tuning it (`softeval eval --soft-prompt`): the first that reads
    SAVED_PART."""
    return next((s.name for s in specs() if SAVED_PART in s.reads), None)


def untuned_names() -> tuple[str, ...]:
    """The default methods that tune nothing (what `softeval eval` scores without a saved soft prompt)."""
    return tuple(s.name for s in specs() if s.default and not s.tunes)


def maker_of(method: str) -> PartMaker | None:
    """The maker of what ``method`` trains (its spec's ``part``, imported here, when a run needs it); None for a
    method that trains nothing. A maker that does not import is a UserError naming the method."""
    target = spec_of(method).part
    if target is None:
        return None
    module, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except Exception as err:  # noqa: BLE001 (another package's code: any failure is one line)
        raise UserError(f"method {method}: its trained part's maker {target} does not load: "
                        f"{type(err).__name__}: {err}") from None


def known(name: object) -> bool:
    """Whether ``name`` is a registered method."""
    _load()
    return isinstance(name, str) and name in _REGISTRY


def spec_of(name: str) -> MethodSpec:
    """The spec of a registered method; an unknown name is a UserError naming the methods there are."""
    _load()
    if isinstance(name, str) and name in _BROKEN:
        raise UserError(f"{_BROKEN[name]}; reinstall or fix that package, or use {', '.join(names())}")
    if not isinstance(name, str) or name not in _REGISTRY:
        raise UserError(f"unknown method {shown(name)}: use {', '.join(names())}")
    return _REGISTRY[name]


def order(methods: Iterable[str]) -> list[str]:
    """``methods`` in table order: registered ones as the registry lists them, then any other by name."""
    rank = {name: i for i, name in enumerate(names())}
    return sorted(set(methods), key=lambda m: (rank.get(m, len(rank)), m))


def reference() -> str | None:
    """The REFERENCE method (the bare prompt): its run gives the format-free references, and post-trained models are
    scored with it (how they are used)."""
    return next(iter(with_role(REFERENCE)), None)


def treatment() -> str | None:
    """The TREATMENT method: the one the knowledge table's permutation scores and paired tests are about."""
    return next(iter(with_role(TREATMENT)), None)


def compared() -> tuple[str, ...]:
    """What a treatment is tested against: the reference, then each baseline."""
    return (*with_role(REFERENCE), *with_role(BASELINE))


def treatment_pairs() -> tuple[tuple[str, str], ...]:
    """Each (baseline, treated) pair of a treatment against what it is compared with (``compared``)."""
    return tuple((a, t) for t in with_role(TREATMENT) for a in compared())


def pairs() -> tuple[tuple[str, str], ...]:
    """The comparisons the verdicts read, each (baseline, treated): ``treatment_pairs``; then each baseline against
    the reference (read when no treatment ran)."""
    return (*treatment_pairs(), *((r, b) for b in with_role(BASELINE) for r in with_role(REFERENCE)))


def colour_of(name: str, fallback: str = "#444444") -> str:
    """A method's chart colour (a run of a method not registered here: ``fallback``)."""
    return _REGISTRY[name].colour if known(name) else fallback


def label_of(name: str) -> str:
    """A method's label (its name when it is not registered here)."""
    return _REGISTRY[name].label if known(name) else name
