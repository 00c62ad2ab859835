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


@torch.no_grad()
def generate(lm: LoadedModel, seqs: Sequence[list[int]], *, soft: torch.Tensor | None = None,
             max_new_tokens: int = 32, stop: Sequence[str] = (), batch_size: int | str = 8,
             progress: Progress = None, prefix_cache: bool | None = None, max_batch_size: int | None = None,
             first_ids: Sequence[list[int]] | None = None,
             targets: Sequence[list[int]] | None = None, max_padding: float | None = None,
             answer_end: AnswerEnd = None) -> Generation:
    """Greedy continuation of each sequence, cut at the first stop string or EOS (``Generation``), or
    where ``answer_end`` finds its answer complete (``finish``).

    ``targets``: also the summed negative log-likelihood of each sequence's target continuation
    (``Generation.target_nll``), read from the generation's own prefill (its cache and first-token
    log-probabilities) instead of a second pass over the prompt (a tuning curve point's held-out
    loss: ``target_loss_value`` = the sum over items / their target tokens).

    ``first_ids``: per sequence, the tokens whose log-probabilities as the first generated token
    ``Generation.first_logprobs`` keeps (the letters of a multiple-choice item), read off the
    generation's own first forward pass instead of a second one (``VllmEngine.generate`` takes the same).

    ``prefix_cache``: None (default) caches the shared prefix when it is at least ``kv_cache.MIN_PREFIX``
    long, True whenever there is one, False never. ``batch_size`` 0 or "auto": fit memory, at most
    ``max_batch_size``; ``max_padding``: see ``length_batches``."""
    outputs: list[str] = [""] * len(seqs)
    limited = [False] * len(seqs)
    target_nll = None if targets is None else [0.0] * len(seqs)
    firsts = None if first_ids is None else [[] for _ in seqs]
    if not seqs:
        return Generation(outputs, limited, target_nll, firsts)

    def on_first(batch: list[int], logp: torch.Tensor) -> None:
        for slot, i in enumerate(batch):
            firsts[i] = [float(logp[slot, t]) for t in first_ids[i]]

    n_soft = 0 if soft is None else soft.shape[0]
    if targets is not None and not grouped_usable(lm, seqs, [[t] for t in targets], n_soft):
        # a sliding-window model whose window the pads before the targets could overrun: a pass of its own
        target_nll = [-row[0] for row in option_logprobs(lm, seqs, [[t] for t in targets], soft=soft,
                                                           batch_size=batch_size)]
        targets = None
    prefix = plan_prefix(lm, seqs, soft, prefix_cache)
    size = resolve_batch_size(lm, batch_size, max(len(s) for s in seqs) + n_soft, max_batch_size,
                              new_tokens=max_new_tokens)
    with skinny_linears(lm.model):  # decoding steps multiply few rows: W @ x^T on CPU (softeval.lm.skinny)
        for batch in length_batches([len(s) for s in seqs], size, max_padding):
            first = (lambda logp, b=batch: on_first(b, logp)) if firsts is not None else None
            part = _generate_batch(lm, [seqs[i] for i in batch], soft, max_new_tokens, stop, prefix, first,
                                   [targets[i] for i in batch] if targets is not None else None, answer_end)
            for i, text, cut in zip(batch, part.texts, part.hit_limit):
                outputs[i], limited[i] = text, cut
            if targets is not None:
                for i, value in zip(batch, part.target_nll):
                    target_nll[i] = value
            if progress:
                progress(len(batch))
    return Generation(outputs, limited, target_nll, firsts)


def _stop_window(lm: LoadedModel, stop: Sequence[str]) -> int:
    """How many trailing tokens to decode to see any stop string appear (each token decodes to at
    least one character, plus a margin for tokenizers that strip a leading space on decode)."""
    return max((len(s) for s in stop), default=0) + 4


def _generate_batch(lm: LoadedModel, seqs, soft, max_new_tokens, stop, prefix: SharedPrefix | None = None,
                    on_first=None, targets=None, answer_end: AnswerEnd = None) -> Generation:
    """The ``Generation`` of one batch (with ``targets``, each row's target negative log-likelihood
    from ``_targets_nll``)."""
    inputs = batch_inputs(lm, seqs, soft, prefix)
    cache = inputs.pop("cache", None)  # a shared prefix's cache, or None: the model makes its own
    mask, positions = inputs["attention_mask"], inputs["position_ids"]
    device = mask.device
    eos = set(lm.eos_ids or ())
    stop = tuple(stop) + end_markers(lm)  # an end marker written out in plain tokens ends the answer too
    window = _stop_window(lm, stop)
    decode = lm.tokenizer.decode
    tokens: list[list[int]] = [[] for _ in seqs]
    live = list(range(len(seqs)))  # rows still generating, in cache order
    ended: set[int] = set()  # rows ended by EOS or a stop string
    logits, out = forward_last(lm, inputs, 1, use_cache=True, cache=cache)
    if on_first is not None:
        on_first(torch.log_softmax(logits[:, -1].float(), dim=-1))
    nll = None if targets is None else _targets_nll(lm, logits, output_cache(out), mask, targets)
    cache = to_growing(output_cache(out))
    next_pos = positions[:, -1:] + 1
    for _ in range(max_new_tokens):
        chosen = logits[:, -1].argmax(-1)
        keep = []
        for slot, (row, token) in enumerate(zip(live, chosen.tolist())):
            if token in eos:
                ended.add(row)
                continue
            tokens[row].append(token)
            if stop:
                tail = decode(tokens[row][-window:], skip_special_tokens=False)
                if any(s in tail for s in stop):
                    ended.add(row)
                    continue
            if answer_end is not None and answer_end(decode(tokens[row], skip_special_tokens=False)) is not None:
                ended.add(row)
                continue
            keep.append(slot)
        if not keep or len(tokens[live[keep[0]]]) >= max_new_tokens:
            break
        if len(keep) < len(live):  # drop finished rows from the batch and the cache
            index = torch.tensor(keep, device=device)
            cache.batch_select_indices(index)
            mask, next_pos, chosen = mask[index], next_pos[index], chosen[index]
            live = [live[k] for k in keep]
        mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=1)
        logits, out = forward_last(
            lm, {"input_ids": chosen[:, None], "attention_mask": mask, "position_ids": next_pos}, 1,
            cache=cache, use_cache=True)
        cache = output_cache(out)
        next_pos = next_pos + 1
    return Generation([finish(decode(t, skip_special_tokens=False), stop, answer_end)[0] for t in tokens],
                      [row not in ended and max_new_tokens > 0 for row in range(len(seqs))], nll)


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
