"""The backends by name (``--backend``), and the engine of a loaded model: started, kept, closed.

This is the one registry of backends, and a lazy one (``REGISTRY``, of softeval's one registry shape:
softeval/registry.py). A backend is a ``Backend``: a description that names its engine (and its checks) by module
path, so that nothing imports an engine until its backend starts one (importing this module imports neither vLLM
nor ``vllm_engine``). The built-ins are ``BUILT_IN``; another distribution adds one through the entry-point group
``softeval.backends`` (``ENTRY_POINTS``: the entry point's name is the backend's, its value names a ``Backend``,
loaded when that backend is looked up; entry points are read once per process, and one that does not load is one
line when chosen, breaking no other backend); a program or a test calls ``register``. ``--backend``'s choices
(``NAMES``, a live view), default and help (``backend_help``, written when ``--help`` shows it), the refusal of
engine arguments given to a backend that takes none and each backend's own checks (run/validate.py), and what
`softeval track` passes on all come from here (docs/reference/architecture.md, "Adding a backend"). ``run`` and
``sweep`` never name a backend.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

from softeval.errors import UserError, shown
from softeval.lm.engine import HF, Engine, Names
from softeval.methods.part import ENTERS, INPUT_PREFIX
from softeval.registry import Registry

if TYPE_CHECKING:  # annotations only: the backends' table imports no torch (the option table reads it)
    import torch

    from softeval.lm.models import LoadedModel

ENTRY_POINTS = "softeval.backends"  # the entry-point group through which another distribution adds a backend

# (the loaded model, the run's --eval-batch-size, its engine arguments or None) -> a started Engine
StartEngine = Callable[["LoadedModel", int, dict | None], Engine]
# (model, the device the run runs on or None on a sweep's driver, engine arguments, Names) -> None, or a UserError
Check = Callable[[str, str | None, dict | None, Names], None]


@dataclass(frozen=True)
class Backend:
    """One ``--backend``: how a run starts its engine and what it checks before a model loads. ``engine`` and
    ``check`` are callables or the ``"module:name"`` of one, imported when first called: a backend's
    description costs nothing to load, its engine is imported only when the backend is chosen."""

    name: str  # the --backend value, a sweep file's `backend:`
    engine: str | StartEngine  # starts its engine: (lm, batch size, engine arguments) -> Engine
    help: str  # what --backend's help says of it after its name
    # Kept on the model (``LoadedModel.engine``) for the next jobs with the same engine arguments, whatever
    # their batch size (a slow start: vLLM's); False: a new engine for each job, closed at its end (the HF
    # engine costs nothing to start)
    keep: bool = False
    # it reads engine arguments (--engine-arg, a sweep file's `engine_args:`); given to one without, they are refused
    takes_args: bool = False
    # its engine in messages ("vLLM": "starting the vLLM engine for ..."); None: it starts silently
    label: str | None = None
    started: Callable[[Engine], str] | None = None  # the line said once a labelled engine has started
    # what would fail later (vLLM not installed for the device, an unknown engine argument), refused before a
    # model loads; ``Check`` says its arguments
    check: str | Check | None = None
    # the ways a trained part enters the forward pass (methods/part.py ENTERS) that its engine reads: every engine
    # takes the vectors put before a prompt; a part in the transformers model (a LoRA adapter, prefix tuning's
    # per-layer keys and values) only an engine that runs that model (hf): one with weights of its own (vLLM) would
    # score the base model, so such a method is refused on it (run/validate.check_backend)
    parts: tuple[str, ...] = (INPUT_PREFIX,)

    def start(self, lm: LoadedModel, batch_size: int, args: dict | None) -> Engine:
        """A started engine of this backend (its module imported now, the first time)."""
        return _resolved(self.engine)(lm, batch_size, args)

    def checked(self, model: str, device: str | None, args: dict | None, names: Names) -> None:
        """Its checks before a model loads, where it has any."""
        if self.check is not None:
            _resolved(self.check)(model, device, args, names)


def _resolved(ref):
    """A callable given as itself or as ``"module:name"`` (its module imported now)."""
    return pkgutil.resolve_name(ref) if isinstance(ref, str) else ref


def _is_backend(name: str, obj: object) -> Backend:
    """The registry's check: an entry names a ``Backend`` of its own name."""
    if not isinstance(obj, Backend) or obj.name != name:
        raise TypeError(f"it names {shown(obj)}, not a softeval.lm.backends.Backend called {name}")
    return obj


BUILT_IN: dict[str, Backend] = {b.name: b for b in (
    Backend(HF, "softeval.lm.hf_engine:start", "the default: softeval's own", parts=ENTERS),
    Backend("vllm", "softeval.lm.vllm_engine:start",
            "vLLM; tuning, and log-likelihoods under a soft prompt, stay on hf; docs/reference/backends.md",
            keep=True, takes_args=True, label="vLLM", check="softeval.lm.vllm_args:check",
            started=lambda e: f"vLLM {e.version} engine started in {e.start_seconds:.0f}s"),
)}
DEFAULT = HF
REGISTRY: Registry[Backend] = Registry("backend", ENTRY_POINTS, BUILT_IN.items(), check=_is_backend)


def register(backend: Backend) -> None:
    """Make ``backend`` a choice of ``--backend`` (and of a sweep file's ``backend:``) in this process; a
    built-in's name stays the built-in's (ValueError)."""
    REGISTRY.register(backend.name, backend, replace=True)


def unregister(name: str) -> None:
    """Take back a backend ``register`` added (a test's own, after the test)."""
    REGISTRY.unregister(name)


def names() -> tuple[str, ...]:
    """Every backend's name: the built-ins, the registered ones, then those of entry points."""
    return REGISTRY.names()


def known(name: object) -> bool:
    return name in REGISTRY


class _Names(Collection):
    """``--backend``'s choices, read when asked: a backend registered later is one of them (entry points are
    read once per process)."""

    def __contains__(self, name: object) -> bool:
        return known(name)

    def __iter__(self) -> Iterator[str]:
        return iter(names())

    def __len__(self) -> int:
        return len(names())


NAMES = _Names()


def backend(name: str) -> Backend:
    """The backend called ``name``; one of an entry point is loaded now (its package's description, not its
    engine). An unknown name, or an entry point that does not load or names no ``Backend`` of that name, is a
    UserError (registry.py: one line naming the entry point, its distribution and why)."""
    return REGISTRY.get(name)


def described() -> dict[str, Backend | None]:
    """Every backend by name with its description, None where an entry point's does not load."""
    return {name: None if isinstance(b, UserError) else b for name, b in REGISTRY.loaded().items()}


def backend_help() -> str:
    """``--backend``'s help: each backend with what it is, as they are when it is shown."""
    said = [f"{name} ({b.help if b else 'its entry point does not load: choose it to see why'})"
            for name, b in described().items()]
    return "generation engine: " + (", ".join(said[:-1]) + " or " + said[-1] if len(said) > 1 else said[0])


def start_engine(lm: LoadedModel, name: str, batch_size: int, args: dict | None,
                 status: Callable[[str], AbstractContextManager] = lambda what: nullcontext(),
                 say: Callable[[str], None] = lambda line: None) -> Engine:
    """An engine of backend ``name`` for ``lm`` (``args``: its engine arguments). One the backend keeps is kept
    on the model and given again while the engine arguments stay the same (a sweep worker's model keeps
    its vLLM engine for all its jobs); another replaces it, the old one closed first. ``status(what)``
    is entered while a labelled engine starts, ``say`` told the line it gives once started."""
    spec = backend(name)
    if not spec.keep:
        return spec.start(lm, batch_size, args)
    if lm.engine is not None and lm.engine_started == (name, args or {}):
        return lm.engine
    close_engine(lm)
    with status(f"the {spec.label} engine") if spec.label else nullcontext():
        engine = spec.start(lm, batch_size, args)
    lm.engine, lm.engine_started = engine, (name, dict(args or {}))
    if spec.started is not None:
        say(spec.started(engine))
    return engine


def loglikelihood_engine(engine: Engine, lm: LoadedModel, batch_size: int,
                         soft: torch.Tensor | None) -> tuple[Engine, str | None]:
    """The engine that computes a run's log-likelihoods (``Engine.loglikelihood``) with ``soft``: ``engine`` where
    it can, else the HF engine on the same model (``batch_size``: the run's --eval-batch-size) with ``engine``'s
    reason (``Engine.loglikelihood_refusal``). An engine without the two methods (another package's, written
    before engines computed log-likelihoods) is one that cannot."""
    refusal = getattr(engine, "loglikelihood_refusal", None)
    if refusal is None or not callable(getattr(engine, "loglikelihood", None)):
        why = f"the {engine.record().get('backend', '?')} engine computes no log-likelihoods"
    else:
        why = refusal(soft)
    if why is None:
        return engine, None
    return BUILT_IN[HF].start(lm, batch_size, None), why


def end_engine(lm: LoadedModel | None, engine: Engine | None) -> None:
    """A job is done with ``engine``: closed, unless it is the one kept on ``lm`` for the next jobs."""
    if engine is not None and (lm is None or engine is not lm.engine):
        engine.close()


def close_engine(lm: LoadedModel | None) -> None:
    """Shut the engine kept on ``lm`` down, if it has one (its processes end, its memory is freed)."""
    if lm is not None and lm.engine is not None:
        lm.engine.close()
        lm.engine, lm.engine_started = None, None
