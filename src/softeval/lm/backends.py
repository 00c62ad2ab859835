"""The backends by name (``--backend``), and the engine of a loaded model: started, kept, closed.

``BACKENDS`` is the one registry. ``--backend``'s choices, default and help (the option table,
run/config.py), the refusal of engine arguments given for another backend and each backend's own checks
(run/validate.py) and what `softeval track` passes on all come from it, so a backend is added here and
nowhere else (docs/backends.md, "Adding a backend"). ``run`` and ``sweep`` never name a backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

from softeval.lm import generation, vllm_args
from softeval.lm.batching import Progress
from softeval.lm.engine import HF, AnswerEnd, Engine, Generation, Names
from softeval.lm.models import LoadedModel
from softeval.lm.vllm_engine import VllmEngine


class HfEngine:
    """softeval's own engine (``--backend hf``): ``generation.generate`` on the transformers model, in
    batches of the run's ``--eval-batch-size``."""

    def __init__(self, lm: LoadedModel, batch_size: int | str = 8) -> None:
        self.lm = lm
        self.batch_size = batch_size

    def generate(self, seqs: Sequence[list[int]], *, soft: torch.Tensor | None = None,
                 max_new_tokens: int = 32, stop: Sequence[str] = (), progress: Progress = None,
                 first_ids: Sequence[list[int]] | None = None, answer_end: AnswerEnd = None) -> Generation:
        return generation.generate(self.lm, seqs, soft=soft, max_new_tokens=max_new_tokens, stop=stop,
                                   batch_size=self.batch_size, first_ids=first_ids, progress=progress,
                                   answer_end=answer_end)

    def record(self) -> dict:
        return {"backend": HF}

    def close(self) -> None:
        """Nothing to free: the model is the run's."""


@dataclass(frozen=True)
class Backend:
    """One ``--backend``: how a run starts its engine and what it checks before a model loads."""

    name: str  # the --backend value, a sweep file's `backend:`
    # (the loaded model, the run's --eval-batch-size, its engine arguments or None) -> a started Engine
    start: Callable[[LoadedModel, int, dict | None], Engine]
    help: str  # what --backend's help says of it after its name
    # Kept on the model (``LoadedModel.engine``) for the next jobs with the same engine arguments, whatever
    # their batch size (a slow start: vLLM's); False: a new engine for each job, closed at its end (the HF
    # engine costs nothing to start)
    keep: bool = False
    # the run option holding its engine arguments (vllm: --vllm-arg); None: it takes none
    args: str | None = None
    # its engine in messages ("vLLM": "starting the vLLM engine for ..."); None: it starts silently
    label: str | None = None
    started: Callable[[Engine], str] | None = None  # the line said once a labelled engine has started
    # (model, the device the run runs on or None on a sweep's driver, engine arguments, Names): a UserError
    # for what would fail later (vLLM not installed for the device, an unknown engine argument)
    check: Callable[[str, str | None, dict | None, Names], None] | None = None
    # scores with a LoRA adapter put into the transformers model (lm.lora; --method lora): the HF engine reads
    # that model; an engine with weights of its own (vLLM) would score the base model, so it is refused
    lora: bool = False


BACKENDS: dict[str, Backend] = {}
NAMES = BACKENDS.keys()  # a live view: --backend's choices, a backend registered later included
DEFAULT = HF


def register(backend: Backend) -> None:
    """Make ``backend`` a choice of ``--backend`` (and of a sweep file's ``backend:``)."""
    BACKENDS[backend.name] = backend


register(Backend(HF, lambda lm, batch_size, args: HfEngine(lm, batch_size), "the default: softeval's own", lora=True))
register(Backend(
    "vllm", lambda lm, batch_size, args: VllmEngine(lm, args),
    "vLLM; log-likelihoods and tuning stay on hf; docs/backends.md", keep=True, args="vllm", label="vLLM",
    started=lambda e: f"vLLM {e.version} engine started in {e.start_seconds:.0f}s", check=vllm_args.check))


def backend_help() -> str:
    """``--backend``'s help: each backend with what it is."""
    said = [f"{b.name} ({b.help})" for b in BACKENDS.values()]
    return "generation engine: " + (", ".join(said[:-1]) + " or " + said[-1] if len(said) > 1 else said[0])


def start_engine(lm: LoadedModel, backend: str, batch_size: int, args: dict | None,
                 status: Callable[[str], AbstractContextManager] = lambda what: nullcontext(),
                 say: Callable[[str], None] = lambda line: None) -> Engine:
    """An engine of ``backend`` for ``lm`` (``args``: its engine arguments). One the backend keeps is kept
    on the model and given again while the engine arguments stay the same (a sweep worker's model keeps
    its vLLM engine for all its jobs); another replaces it, the old one closed first. ``status(what)``
    is entered while a labelled engine starts, ``say`` told the line it gives once started."""
    spec = BACKENDS[backend]
    if not spec.keep:
        return spec.start(lm, batch_size, args)
    if lm.engine is not None and lm.engine_started == (backend, args or {}):
        return lm.engine
    close_engine(lm)
    with status(f"the {spec.label} engine") if spec.label else nullcontext():
        engine = spec.start(lm, batch_size, args)
    lm.engine, lm.engine_started = engine, (backend, dict(args or {}))
    if spec.started is not None:
        say(spec.started(engine))
    return engine


def end_engine(lm: LoadedModel | None, engine: Engine | None) -> None:
    """A job is done with ``engine``: closed, unless it is the one kept on ``lm`` for the next jobs."""
    if engine is not None and (lm is None or engine is not lm.engine):
        engine.close()


def close_engine(lm: LoadedModel | None) -> None:
    """Shut the engine kept on ``lm`` down, if it has one (its processes end, its memory is freed)."""
    if lm is not None and lm.engine is not None:
        lm.engine.close()
        lm.engine, lm.engine_started = None, None
