"""Batched greedy generation on a frozen model, cut at stop strings, end markers, EOS and a complete answer.

Takes token-id sequences (already templated) and an optional soft prompt, laid out as every entry
point of ``softeval.lm`` lays them (``softprompt.layout_inputs``), so zero-shot, few-shot and soft
prompt share one path; batches are grouped by length (fewer pads) and results come back in the
caller's order. Speed paths (each checked against the plain path in
tests/lm/test_engine_speed_paths.py), besides the shared prefix and the growing cache of
``softeval.lm.kv_cache``:

- finished rows are dropped from the batch and the KV cache, and stop strings are checked on the
  decoded tail of each row only (one full decode per row at the end).
- on CPU, the linear layers' few-row products (decoding steps, the head on the last positions) run
  as ``W @ x^T``, which MKL streams from memory up to twice as fast as ``x @ W^T``
  (``softeval.lm.skinny``; same outputs).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch

from softeval.lm.batching import Progress, length_batches
from softeval.lm.engine import AnswerEnd, Generation
from softeval.lm.kv_cache import (
    SharedPrefix,
    batch_inputs,
    forward_last,
    output_cache,
    plan_prefix,
    to_growing,
)
from softeval.lm.loglik import grouped_usable, option_logprobs
from softeval.lm.memory import resolve_batch_size
from softeval.lm.models import LoadedModel, end_of_turn_id
from softeval.lm.skinny import skinny_linears
from softeval.lm.softprompt import layout_inputs


@dataclass(frozen=True)
class GenerationSettings:
    """How ``generate`` generates, besides what it reads and what it gives back: where an output ends (at most
    ``max_new_tokens``, the first of ``stop``, EOS, or where ``answer_end`` finds its answer complete) and how the
    prompts are batched. ``batch_size`` 0 or "auto": fit memory, at most ``max_batch_size``; ``max_padding``: see
    ``length_batches``; ``prefix_cache``: None caches the shared prefix when it is at least
    ``kv_cache.MIN_PREFIX`` long, True whenever there is one, False never."""

    max_new_tokens: int = 32
    stop: Sequence[str] = ()
    answer_end: AnswerEnd = None
    batch_size: int | str = 8
    max_batch_size: int | None = None
    max_padding: float | None = None
    prefix_cache: bool | None = None


@torch.no_grad()
def generate(lm: LoadedModel, seqs: Sequence[list[int]], *, soft: torch.Tensor | None = None,
             progress: Progress = None, first_ids: Sequence[list[int]] | None = None,
             targets: Sequence[list[int]] | None = None, **settings) -> Generation:
    """Greedy continuation of each sequence, cut at the first stop string or EOS (``Generation``), or
    where ``answer_end`` finds its answer complete (``finish``). ``settings``: the fields of
    ``GenerationSettings``, by name (``max_new_tokens=16, stop=task.stop, batch_size="auto"``).

    ``targets``: also the summed negative log-likelihood of each sequence's target continuation
    (``Generation.target_nll``), read from the generation's own prefill (its cache and first-token
    log-probabilities) instead of a second pass over the prompt (a tuning curve point's held-out
    loss: ``target_loss_value`` = the sum over items / their target tokens).

    ``first_ids``: per sequence, the tokens whose log-probabilities as the first generated token
    ``Generation.first_logprobs`` keeps (the letters of a multiple-choice item), read off the
    generation's own first forward pass instead of a second one (``VllmEngine.generate`` takes the same)."""
    config = GenerationSettings(**settings)
    texts, limited = [""] * len(seqs), [False] * len(seqs)
    target_nll = None if targets is None else [0.0] * len(seqs)
    firsts = None if first_ids is None else [[] for _ in seqs]
    if not seqs:
        return Generation(texts, limited, target_nll, firsts)
    n_soft = 0 if soft is None else soft.shape[0]
    if targets is not None and not grouped_usable(lm, seqs, [[t] for t in targets], n_soft):
        # a sliding-window model whose window the pads before the targets could overrun: a pass of its own
        target_nll = [-row[0] for row in option_logprobs(lm, seqs, [[t] for t in targets], soft=soft,
                                                           batch_size=config.batch_size)]
        targets = None
    prefix = plan_prefix(lm, seqs, soft, config.prefix_cache)
    size = resolve_batch_size(lm, config.batch_size, max(len(s) for s in seqs) + n_soft, config.max_batch_size,
                              new_tokens=config.max_new_tokens)
    with skinny_linears(lm.model):  # decoding steps multiply few rows: W @ x^T on CPU (softeval.lm.skinny)
        for batch in length_batches([len(s) for s in seqs], size, config.max_padding):
            first = None if firsts is None else partial(_keep_first, firsts, first_ids, batch)
            part = _generate_batch(lm, [seqs[i] for i in batch], soft, config, prefix, first,
                                   [targets[i] for i in batch] if targets is not None else None)
            for i, text, cut in zip(batch, part.texts, part.hit_limit):
                texts[i], limited[i] = text, cut
            for i, value in zip(batch, part.target_nll or ()):  # with targets
                target_nll[i] = value
            if progress:
                progress(len(batch))
    return Generation(texts, limited, target_nll, firsts)


def _keep_first(firsts: list[list[float]], first_ids: Sequence[list[int]], batch: list[int],
                logp: torch.Tensor) -> None:
    """Into ``firsts``, each row's log-probabilities (``logp``: the batch's first generated token's) of its
    ``first_ids``; ``batch``: the rows' places among the caller's sequences."""
    for slot, i in enumerate(batch):
        firsts[i] = [float(logp[slot, t]) for t in first_ids[i]]


def _stop_window(lm: LoadedModel, stop: Sequence[str]) -> int:
    """How many trailing tokens to decode to see any stop string appear (each token decodes to at
    least one character, plus a margin for tokenizers that strip a leading space on decode)."""
    return max((len(s) for s in stop), default=0) + 4


def _generate_batch(lm: LoadedModel, seqs, soft, config: GenerationSettings, prefix: SharedPrefix | None = None,
                    on_first=None, targets=None) -> Generation:
    """The ``Generation`` of one batch (with ``targets``, each row's target negative log-likelihood
    from ``_targets_nll``)."""
    inputs = batch_inputs(lm, seqs, soft, prefix)
    cache = inputs.pop("cache", None)  # a shared prefix's cache, or None: the model makes its own
    mask, positions = inputs["attention_mask"], inputs["position_ids"]
    device = mask.device
    rows = _Rows(lm, len(seqs), config)
    logits, out = forward_last(lm, inputs, 1, use_cache=True, cache=cache)
    if on_first is not None:
        on_first(torch.log_softmax(logits[:, -1].float(), dim=-1))
    nll = None if targets is None else _targets_nll(lm, logits, output_cache(out), mask, targets)
    cache = to_growing(output_cache(out))
    next_pos = positions[:, -1:] + 1
    for _ in range(config.max_new_tokens):
        chosen = logits[:, -1].argmax(-1)
        keep = rows.add(chosen.tolist())
        if not keep or len(rows.tokens[rows.live[keep[0]]]) >= config.max_new_tokens:
            break
        if len(keep) < len(rows.live):  # drop finished rows from the batch and the cache
            index = torch.tensor(keep, device=device)
            cache.batch_select_indices(index)
            mask, next_pos, chosen = mask[index], next_pos[index], chosen[index]
            rows.live = [rows.live[k] for k in keep]
        mask = torch.cat([mask, mask.new_ones((len(rows.live), 1))], dim=1)
        logits, out = forward_last(
            lm, {"input_ids": chosen[:, None], "attention_mask": mask, "position_ids": next_pos}, 1,
            cache=cache, use_cache=True)
        cache = output_cache(out)
        next_pos = next_pos + 1
    return rows.generation(config.max_new_tokens, nll)


class _Rows:
    """The tokens each row of a batch has generated, the rows still generating (``live``, in cache order) and
    those ended by EOS, a stop string (``settings.stop`` and the model's end markers) or a complete answer."""

    def __init__(self, lm: LoadedModel, n: int, settings: GenerationSettings) -> None:
        self.eos = set(lm.eos_ids or ())
        # an end marker written out in plain tokens ends the answer too
        self.stop = tuple(settings.stop) + end_markers(lm)
        self.window = _stop_window(lm, self.stop)
        self.answer_end = settings.answer_end
        self.decode = lm.tokenizer.decode
        self.tokens: list[list[int]] = [[] for _ in range(n)]
        self.live = list(range(n))
        self.ended: set[int] = set()

    def add(self, chosen: list[int]) -> list[int]:
        """Each live row's next token (``chosen``, in cache order) added; the slots of the rows it did not end."""
        return [slot for slot, (row, token) in enumerate(zip(self.live, chosen)) if not self._ends(row, token)]

    def _ends(self, row: int, token: int) -> bool:
        """Whether ``token`` ends ``row``: EOS (not kept), or a stop string or a complete answer it writes."""
        if token not in self.eos:
            self.tokens[row].append(token)
            if not (self._stopped(self.tokens[row]) or self._complete(self.tokens[row])):
                return False
        self.ended.add(row)
        return True

    def _stopped(self, tokens: list[int]) -> bool:
        if not self.stop:
            return False
        tail = self.decode(tokens[-self.window:], skip_special_tokens=False)
        return any(s in tail for s in self.stop)

    def _complete(self, tokens: list[int]) -> bool:
        if self.answer_end is None:
            return False
        return self.answer_end(self.decode(tokens, skip_special_tokens=False)) is not None

    def generation(self, max_new_tokens: int, nll: list[float] | None) -> Generation:
        """The batch's ``Generation``: each row's text cut as every engine cuts it (``finish``)."""
        return Generation([finish(self.decode(t, skip_special_tokens=False), self.stop, self.answer_end)[0]
                           for t in self.tokens],
                          [row not in self.ended and max_new_tokens > 0 for row in range(len(self.tokens))], nll)


def _targets_nll(lm: LoadedModel, logits: torch.Tensor, cache, mask: torch.Tensor, targets) -> list[float]:
    """Summed negative log-likelihood of each row's target after its prompt, from a prefill's last
    logits (they predict the first target token) and a copy of its cache (the rest of each target
    runs as ``[pads][target[:-1]]`` after it, as ``grouped_option_logprobs`` runs options)."""
    first = torch.log_softmax(logits[:, -1].float(), dim=-1)
    nll = [-float(first[r, t[0]]) if t else 0.0 for r, t in enumerate(targets)]
    rows = [r for r, t in enumerate(targets) if len(t) > 1]
    if not rows:
        return nll
    part = copy.deepcopy(cache)
    index = torch.tensor(rows, device=mask.device)
    part.batch_select_indices(index)
    rest = [list(targets[r][:-1]) for r in rows]
    width = max(map(len, rest))
    later, _ = forward_last(lm, layout_inputs(lm, rest, past_mask=mask[index]), width, cache=part)
    logp = torch.log_softmax(later.float(), dim=-1)
    for slot, r in enumerate(rows):
        wanted = torch.tensor(targets[r][1:], device=logp.device)
        nll[r] -= float(logp[slot, width - len(wanted):].gather(-1, wanted[:, None]).sum())
    return nll


def end_markers(lm: LoadedModel) -> tuple[str, ...]:
    """Texts of the end tokens (EOS ids, the chat template's end of turn): outputs are decoded with
    special tokens kept, and a model may also spell a marker out in ordinary tokens; either way the
    answer ends there instead of failing the strict format with ``B<|im_end|>``."""
    ids = set(lm.eos_ids or ())
    end = end_of_turn_id(lm.tokenizer)
    if end is not None:
        ids.add(end)
    texts = (lm.tokenizer.decode([i], skip_special_tokens=False) for i in sorted(ids))
    return tuple(t for t in texts if t.strip())


def finish(text: str, stop: Sequence[str], answer_end: AnswerEnd = None) -> tuple[str, bool]:
    """An output as every engine gives it back: cut at its first stop string, then where ``answer_end`` says its
    answer is complete (a task's ``Task.answer_end``: GSM8K's line break after the first ``#### N``, after which
    nothing it writes can change what is read), and whether either ended it. The engines end a row at the first
    of the two as it generates (the HF loop) or cut it after (vLLM, which runs on): the same text."""
    cut = cut_at_stop(text, stop)
    at = answer_end(cut) if answer_end is not None else None
    return (cut, len(cut) < len(text)) if at is None else (cut[:at], True)


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    cut = len(text)
    for s in stop:
        at = text.find(s)
        if at != -1:
            cut = min(cut, at)
    return text[:cut]
