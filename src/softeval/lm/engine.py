"""The engine interface: what generates a run's outputs, whichever backend (``--backend``) runs it.

An ``Engine`` takes token-id prompts (already templated by the caller) and an optional soft prompt, and
gives back a ``Generation``: each greedy output cut at the first stop string or end marker (and where the
task's answer is complete), whether it ran out of ``max_new_tokens``, and with ``first_ids`` the
log-probabilities of those tokens (a multiple-choice item's letters) as the first new one. Every backend
keeps that contract: the same stop rule, the same decoding, texts and ``hit_limit`` that mean the same, so
a run's files have one schema. ``loglikelihood`` gives every other log-likelihood a run's scoring needs
(cloze options, ``--permutations``, options longer than a token): per context, the summed log-probability of
each continuation after it. An engine that cannot compute them for a prompt (vLLM gives no prompt
log-probabilities of prompt embeddings, so none under a soft prompt) says why in ``loglikelihood_refusal``;
the HF engine on the same model computes them then (``backends.loglikelihood_engine``), and the run says so
in its log and in results.json's ``engine``. ``record`` is what results.json's ``engine`` says of it;
``close`` frees what it holds.

Two engines are built in: ``hf_engine.HfEngine`` (softeval's own loop on the transformers model,
``generation``) and ``vllm_engine.VllmEngine``. A ``backends.Backend`` says how the run starts one (by
module path: an engine is imported only when its backend is chosen) and what it checks before a model loads;
the registry of backends by name, built-ins and entry points, is ``backends`` (docs/reference/architecture.md, "Adding a
backend"). Tuning is not an engine's: it stays on the transformers model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from softeval.lm.batching import Progress

if TYPE_CHECKING:  # annotations only: the engine's description imports no torch (the CLI's start)
    import torch

HF = "hf"  # the backend of softeval's own engine, and the default

# A task's ``Task.answer_end``: the index where an output's answer is complete, or None while it is not
AnswerEnd = Callable[[str], int | None] | None


@dataclass(frozen=True)
class Generation:
    """What ``generate`` gives, per sequence in the caller's order: ``texts`` (each output, cut at the
    first stop string or end marker), ``hit_limit`` (whether it ran out of ``max_new_tokens`` before
    a stop string or EOS ended it: the output may be cut off), ``target_nll`` (with ``targets``:
    the summed negative log-likelihood of its target; else None) and ``first_logprobs`` (with
    ``first_ids``, on either engine: the log-probability of each of those tokens as the first new one;
    else None)."""

    texts: list[str]
    hit_limit: list[bool]
    target_nll: list[float] | None = None
    first_logprobs: list[list[float]] | None = None


class Engine(Protocol):
    """What generates a run's outputs (``hf_engine.HfEngine``, ``vllm_engine.VllmEngine``)."""

    def generate(self, seqs: Sequence[list[int]], *, soft: torch.Tensor | None = None,
                 max_new_tokens: int = 32, stop: Sequence[str] = (), progress: Progress = None,
                 first_ids: Sequence[list[int]] | None = None,
                 answer_end: AnswerEnd = None) -> Generation:
        """Greedy continuation of each token-id prompt (``soft``: the soft prompt's vectors
        [num_virtual_tokens, hidden_size], placed as ``softprompt.layout_inputs`` places them), cut at the
        first of ``stop``, the model's end markers and EOS, at most ``max_new_tokens``, and then where
        ``answer_end`` (a task's ``Task.answer_end``) finds the answer complete (``generation.finish``: an
        engine may stop there or generate on and cut; ``hit_limit`` is False either way); ``first_ids``: per
        prompt, the tokens whose log-probabilities as the first new token ``Generation.first_logprobs``
        holds. Results in the caller's order; ``progress(n)`` told of each ``n`` prompts done."""
        ...

    def loglikelihood(self, contexts: Sequence[list[int]], continuations: Sequence[Sequence[list[int]]], *,
                      soft: torch.Tensor | None = None, progress: Progress = None) -> list[list[float]]:
        """Per token-id context (each at least one token), the summed log-probability of each of its
        ``continuations`` (token ids; an empty one scores 0.0) after it, with ``soft`` placed as ``generate``
        places it: a multiple-choice item's options, its cloze texts, a gold answer. Results in the caller's
        order; ``progress(n)`` told of each ``n`` contexts done. Only where ``loglikelihood_refusal(soft)`` is
        None."""
        ...

    def loglikelihood_refusal(self, soft: torch.Tensor | None) -> str | None:
        """None where ``loglikelihood`` computes with ``soft`` (None: no soft prompt), else why it cannot, in a
        clause ("vLLM gives no prompt log-probabilities of prompt embeddings"): the HF engine computes them then."""
        ...

    def record(self) -> dict:
        """What results.json's ``engine`` holds: ``{"backend": NAME, ...}`` and whatever else tells how it
        generated (vLLM: its version, its engine arguments and CPU settings)."""
        ...

    def close(self) -> None:
        """Free what the engine holds (processes, memory); it generates no more."""
        ...


class Names(Protocol):
    """How the user wrote the options, for a backend's messages (``run.config.Spelling``): ``--engine-arg``
    and ``--backend vllm`` on the command line, ``'engine_args'`` and ``backend: vllm`` in a sweep file."""

    def key(self, key: str) -> str: ...

    def setting(self, key: str, value: object) -> str: ...
