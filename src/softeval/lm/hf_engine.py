"""softeval's own engine (``--backend hf``, the default): ``generation.generate`` and ``loglik.option_logprobs`` on
the transformers model.

Like every engine it is imported only when its backend starts one (``backends.Backend.engine`` names it by
module path), and it is an ``engine.Engine``: the same prompts, stop rule and ``Generation`` as the others. It
computes log-likelihoods with any soft prompt, so it is also the engine that computes them for another engine
that cannot (``backends.loglikelihood_engine``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from softeval.lm import generation, loglik
from softeval.lm.batching import Progress
from softeval.lm.engine import HF, AnswerEnd, Generation
from softeval.lm.models import LoadedModel


class HfEngine:
    """``generation.generate`` and ``loglik.option_logprobs`` on the transformers model, in batches of the run's
    ``--eval-batch-size``."""

    def __init__(self, lm: LoadedModel, batch_size: int | str = 8) -> None:
        self.lm = lm
        self.batch_size = batch_size

    def generate(self, seqs: Sequence[list[int]], *, soft: torch.Tensor | None = None,
                 max_new_tokens: int = 32, stop: Sequence[str] = (), progress: Progress = None,
                 first_ids: Sequence[list[int]] | None = None, answer_end: AnswerEnd = None) -> Generation:
        return generation.generate(self.lm, seqs, soft=soft, max_new_tokens=max_new_tokens, stop=stop,
                                   batch_size=self.batch_size, first_ids=first_ids, progress=progress,
                                   answer_end=answer_end)

    def loglikelihood(self, contexts: Sequence[list[int]], continuations: Sequence[Sequence[list[int]]], *,
                      soft: torch.Tensor | None = None, progress: Progress = None) -> list[list[float]]:
        return loglik.option_logprobs(self.lm, contexts, continuations, soft=soft, batch_size=self.batch_size,
                                      progress=progress)

    def loglikelihood_refusal(self, soft: torch.Tensor | None) -> str | None:
        return None  # any prompt, any soft prompt: the model's own input embeddings

    def record(self) -> dict:
        return {"backend": HF}

    def close(self) -> None:
        """Nothing to free: the model is the run's."""


def start(lm: LoadedModel, batch_size: int, engine_args: dict | None) -> HfEngine:
    """The hf backend's engine (``backends.Backend.engine``); it takes no engine arguments."""
    return HfEngine(lm, batch_size)
