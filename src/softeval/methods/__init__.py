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

import pkgutil
from collections.abc import Iterable

from softeval.errors import UserError, shown
from softeval.methods.part import PartMaker
from softeval.methods.spec import (  # noqa: F401 (the names every layer imports from here)
    ALTERNATIVE,
    ANSWER_LINE,
    BASELINE,
    LORA_OPTIONS,
    METHOD_OPTIONS,
    NAME,
    POOL_OPTIONS,
    REFERENCE,
    ROLES,
    SAVED_PART,
    SAVED_SOFT_PROMPT,
    SHOT_OPTIONS,
    SOFT_PROMPT_OPTIONS,
    TREATMENT,
    TUNE_DTYPE_RESOLVED,
    TUNING_OPTIONS,
    MethodSpec,
    check,
)
from softeval.registry import Registry

ENTRY_POINTS = "softeval.methods"
# the built-ins, in the order tables show them; each module imported when the registry is first read
REGISTRY: Registry[MethodSpec] = Registry("method", ENTRY_POINTS, [
    (name, f"softeval.methods.{module}:SPEC") for name, module in (
        ("zero-shot", "zero_shot"), ("few-shot", "few_shot"), ("soft-prompt", "soft_prompt"), ("lora", "lora"),
        ("prefix-tuning", "prefix_tuning"))], check=check)


def register(spec: MethodSpec, replace: bool = False) -> MethodSpec:
    """Add ``spec`` to the registry (``replace``: over a method of the same name, for tests); returns it."""
    return REGISTRY.register(spec.name if isinstance(spec, MethodSpec) else str(spec), spec, replace)


def unregister(name: str) -> None:
    """Remove a method (a test's own, after the test)."""
    REGISTRY.unregister(name)


def specs() -> tuple[MethodSpec, ...]:
    """Every method that loads, built-ins first, in the order tables show them (one whose entry point does not load
    is left out here, and said in one line when chosen: ``spec_of``)."""
    return tuple(spec for spec in REGISTRY.loaded().values() if isinstance(spec, MethodSpec))


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


def eval_refusal(method: str, saved: bool) -> str | None:
    """Why `softeval eval` (scoring without tuning; ``saved``: --soft-prompt given) cannot score ``method``, or None."""
    spec = spec_of(method)
    if SAVED_PART in spec.reads and not saved:
        return (f"softeval eval scores the {method} method only with --soft-prompt DIR (use `softeval run` or "
                "`softeval tune` to tune one)")
    if spec.tunes and SAVED_PART not in spec.reads:
        return (f"softeval eval scores without tuning, and {method} tunes its {maker_of(method).what}: use "
                f"`softeval run --method {method}`")
    return None


def untuned_names() -> tuple[str, ...]:
    """The default methods that tune nothing (what `softeval eval` scores without a saved soft prompt)."""
    return tuple(s.name for s in specs() if s.default and not s.tunes)


def maker_of(method: str) -> PartMaker | None:
    """The maker of what ``method`` trains (its spec's ``part``, imported here, when a run needs it); None for a
    method that trains nothing. Another package's maker that does not import is a UserError naming the method; a
    built-in's is softeval's bug, raised as it is (the registry's rule)."""
    target = spec_of(method).part
    if target is None:
        return None
    if method in REGISTRY.built_in_names():
        return pkgutil.resolve_name(target)
    try:
        return pkgutil.resolve_name(target)
    except Exception as err:  # noqa: BLE001 (another package's code: any failure is one line)
        raise UserError(f"method {method}: its trained part's maker {target} does not load: "
                        f"{type(err).__name__}: {err}") from None


def known(name: object) -> bool:
    """Whether ``name`` is a method that loads (only that entry is loaded to tell)."""
    if not isinstance(name, str) or name not in REGISTRY:
        return False
    try:
        REGISTRY.get(name)
    except UserError:
        return False
    return True


def spec_of(name: str) -> MethodSpec:
    """The spec of a registered method; an unknown name is a UserError naming the methods there are, one whose entry
    point does not load a UserError saying why (the registry's one line)."""
    if not isinstance(name, str) or name not in REGISTRY:
        raise UserError(f"unknown method {shown(name)}: use {', '.join(names())}")
    return REGISTRY.get(name)


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
    return spec_of(name).colour if known(name) else fallback


def label_of(name: str) -> str:
    """A method's label (its name when it is not registered here)."""
    return spec_of(name).label if known(name) else name
