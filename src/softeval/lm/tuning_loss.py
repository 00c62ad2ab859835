"""The tuning loss on a frozen model: mean cross-entropy over target tokens only, gradients to the
soft prompt.

- the vocabulary head runs only at the positions that predict a target token (gathered across
  rows), not on rows x longest target: GSM8K and MATH targets range from a few to hundreds of
  tokens, and a big-vocabulary head costs more per position than the rest of a small model.
- a batch is split into forward passes that fit a memory budget (shortest rows together) whose
  gradients accumulate: the same gradient as one pass, a fraction of the memory.
- optionally each target token has a weight (``answer_line_weights``): on a reasoning task the answer
  line ("#### 42") is a few of a target's ~100 tokens, and the plain mean is ruled by the solution.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence

import torch

from softeval.lm.batching import tuning_passes
from softeval.lm.loglik import continuation_logprobs
from softeval.lm.memory import tuning_pass_tokens
from softeval.lm.models import LoadedModel
from softeval.lm.softprompt import layout_inputs

Weights = Sequence[Sequence[float]]

# What the answer line of ``answer_line_weights`` holds, numbered as a task's definition is (part of a weighted run's
# identity: run.config records it beside --answer-share). 2: the answer line ends at its last text token, the end
# token and trailing blanks weigh as the solution does (1: they were in the answer line, so "a bare number, then
# stop" weighed per token about as much as "#### N": docs/research/claim-a.md).
ANSWER_LINE_REVISION = 2


def target_loss(lm: LoadedModel, prompts: Sequence[list[int]], targets: Sequence[list[int]],
                soft: torch.Tensor, weights: Weights | None = None) -> torch.Tensor:
    """Mean cross-entropy over target tokens only (prompt tokens carry no loss), with gradients
    flowing to the soft prompt; with ``weights`` (one per target token) the weighted mean. The
    vocabulary head runs only at the positions that predict a target token (``target_head``); a model
    whose head cannot be run apart from its body gets the head on the last max(len(target))+1
    positions of every row instead."""
    seqs = [list(p) + list(t) for p, t in zip(prompts, targets)]
    flat = [1.0 for t in targets for _ in t] if weights is None else [float(w) for row in weights for w in row]
    head = target_head(lm)
    if head is None:
        per_token = torch.cat(continuation_logprobs(lm, seqs, targets, soft))
        w = torch.tensor(flat, dtype=per_token.dtype, device=per_token.device)
        return -(per_token * w).sum() / w.sum().clamp_min(1e-30)
    hidden = lm.model.get_decoder()(**layout_inputs(lm, seqs, soft)).last_hidden_state
    width = hidden.shape[1]  # left padded: every row ends at the last position
    rows = torch.cat([torch.full((len(t),), r) for r, t in enumerate(targets)]).to(hidden.device)
    cols = torch.cat([torch.arange(width - 1 - len(t), width - 1) for t in targets]).to(hidden.device)
    logits = head(hidden[rows, cols])
    labels = torch.tensor([tok for t in targets for tok in t], device=logits.device)
    w = torch.tensor(flat, device=logits.device)
    per_token = torch.nn.functional.cross_entropy(logits.float(), labels, reduction="none")
    return (per_token * w).sum() / w.sum().clamp_min(1e-30)


def answer_line_weights(tokenizer, targets: Sequence[list[int]], share: float | None) -> Weights | None:
    """Token weights that give each target's last line (the answer line: from the last token holding a
    new line to the last token with text; trailing blank tokens and the end token are not in it) ``share`` of a
    batch's loss and the rest of the targets the remainder, each part a mean over its tokens; None (the plain mean) when
    ``share`` is None or the batch has no answer line apart from the rest (one-line targets)."""
    if share is None:
        return None
    in_line = [_answer_line_mask(tokenizer, tuple(t)) for t in targets]
    n_line = sum(sum(m) for m in in_line)
    n_rest = sum(len(m) - sum(m) for m in in_line)
    if not n_line or not n_rest:
        return None
    return [[share / n_line if m else (1 - share) / n_rest for m in mask] for mask in in_line]


@functools.lru_cache(maxsize=65_536)  # a tuning sees the same targets epoch after epoch: decode each once
def _answer_line_mask(tokenizer, target: tuple[int, ...]) -> tuple[bool, ...]:
    texts = [tokenizer.decode([tok], skip_special_tokens=True) for tok in target]  # the end token: blank
    end = len(texts)
    while end and not texts[end - 1].strip():
        end -= 1
    breaks = [i for i in range(end) if "\n" in texts[i]]
    if not breaks:  # one line: no answer line apart from the rest
        return (True,) * len(target)
    start = breaks[-1]  # the new line itself: where the model writes the answer line or stops
    return tuple(start <= i < end for i in range(len(target)))  # revision 2: the end token weighs as the rest


_TARGET_HEADS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def target_head(lm: LoadedModel) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The model's vocabulary head as a function of final hidden states, or None where running it
    apart from the body does not give the model's own logits.

    Tuning needs logits only where a target token is predicted; with the head applied after
    gathering those positions, a batch of long and short targets (GSM8K, MATH solutions) costs the
    head's compute on its target tokens only, not rows x longest target. The head is the output
    embedding plus the final-logit soft-capping some models have (Gemma 2); any other model-specific
    step (a logit scale) is caught by comparing, once per model, against the model's own logits on a
    short input, and then the plain path is used."""
    model = lm.model
    if model not in _TARGET_HEADS:
        _TARGET_HEADS[model] = _checked_head(lm)
    return _TARGET_HEADS[model]


def _checked_head(lm: LoadedModel):
    model = lm.model
    try:
        decoder, out_embed = model.get_decoder(), model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return None
    if decoder is None or out_embed is None or decoder is model:
        return None
    cfg = getattr(model.config, "text_config", model.config)
    cap = getattr(cfg, "final_logit_softcapping", None)

    def head(hidden: torch.Tensor) -> torch.Tensor:
        logits = out_embed(hidden)
        return logits if not cap else torch.tanh(logits / cap) * cap

    probe = layout_inputs(lm, [list(range(min(8, out_embed.weight.shape[0])))], None)
    try:
        with torch.no_grad():
            mine = head(decoder(**probe).last_hidden_state).float()
            theirs = model(**probe).logits.float()
    except (TypeError, ValueError, RuntimeError, AttributeError):
        return None
    same = mine.shape == theirs.shape and torch.allclose(mine, theirs, rtol=1e-3, atol=1e-3 * float(theirs.abs().max()))
    return head if same else None


def target_loss_backward(lm: LoadedModel, prompts: Sequence[list[int]], targets: Sequence[list[int]],
                         soft: torch.Tensor, max_pass_tokens: int | None = None,
                         weights: Weights | None = None) -> float:
    """``target_loss(...).backward()`` done in several forward/backward passes that each fit the
    memory budget: gradients accumulate into ``soft.grad`` and equal those of the whole batch at
    once (each pass is weighted by its share of the batch's target weight). Returns the loss."""
    loss = 0.0
    for part in _weighted_passes(lm, prompts, targets, soft, max_pass_tokens, weights):
        part.backward()
        loss += float(part.detach())
    return loss


@torch.no_grad()
def target_loss_value(lm: LoadedModel, prompts: Sequence[list[int]], targets: Sequence[list[int]],
                      soft: torch.Tensor | None, max_pass_tokens: int | None = None,
                      weights: Weights | None = None) -> float:
    """``target_loss`` (weighted by ``weights`` where given) without gradients, in passes that fit memory
    (the held-out loss of a tuning curve point)."""
    return sum(float(part) for part in _weighted_passes(lm, prompts, targets, soft, max_pass_tokens, weights))


def _weighted_passes(lm: LoadedModel, prompts, targets, soft, max_pass_tokens, weights=None):
    """``target_loss`` of each pass of a batch, weighted by its share of the batch's target weight
    (the parts sum to the loss of the whole batch)."""
    budget = max_pass_tokens or tuning_pass_tokens(lm)
    weights = weights if weights is not None else [[1.0] * len(t) for t in targets]
    total = sum(map(sum, weights))
    for rows in tuning_passes([len(p) + len(t) for p, t in zip(prompts, targets)], budget):
        part = target_loss(lm, [prompts[r] for r in rows], [targets[r] for r in rows], soft,
                           [weights[r] for r in rows])
        yield part * (sum(sum(weights[r]) for r in rows) / total)
