"""Batched greedy generation, option log-likelihoods and the tuning loss, on a frozen model.

Every entry point takes token-id sequences (already templated) and an optional soft prompt and goes
through ``build_inputs``, so zero-shot, few-shot and soft-prompt share one path. Batches are
grouped by length (fewer pads) and results come back in the caller's order.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

import torch

from softeval.softprompt import build_inputs

Progress = Callable[[int], None] | None


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first, so memory peaks early)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def _supports_logits_to_keep(model) -> bool:
    return "logits_to_keep" in inspect.signature(model.forward).parameters


def forward_last(lm, inputs: dict, keep: int, **kwargs):
    """Forward pass that computes the vocabulary head only on the last ``keep`` positions."""
    if _supports_logits_to_keep(lm.model):
        out = lm.model(**inputs, logits_to_keep=keep, **kwargs)
        return out.logits[:, -keep:], out
    out = lm.model(**inputs, **kwargs)
    return out.logits[:, -keep:], out


@torch.no_grad()
def generate(lm, seqs: Sequence[list[int]], *, soft: torch.Tensor | None = None, max_new_tokens: int = 32,
             stop: Sequence[str] = (), batch_size: int = 8, progress: Progress = None) -> list[str]:
    """Greedy continuation of each sequence, cut at the first stop string or EOS."""
    outputs: list[str] = [""] * len(seqs)
    for batch in length_batches([len(s) for s in seqs], batch_size):
        texts = _generate_batch(lm, [seqs[i] for i in batch], soft, max_new_tokens, stop)
        for i, text in zip(batch, texts):
            outputs[i] = text
        if progress:
            progress(len(batch))
    return outputs


def _generate_batch(lm, seqs, soft, max_new_tokens, stop) -> list[str]:
    inputs = build_inputs(lm, list(seqs), soft)
    mask, positions = inputs["attention_mask"], inputs["position_ids"]
    eos = torch.tensor(lm.eos_ids or [-1], device=mask.device)
    tokens: list[list[int]] = [[] for _ in seqs]
    texts = [""] * len(seqs)
    live = list(range(len(seqs)))  # rows still generating, in cache order
    logits, out = forward_last(lm, inputs, 1, use_cache=True)
    cache = out.past_key_values
    next_pos = positions[:, -1:] + 1
    for _ in range(max_new_tokens):
        chosen = logits[:, -1].argmax(-1)
        keep = []
        for slot, row in enumerate(live):
            token = int(chosen[slot])
            if bool((eos == token).any()):
                continue
            tokens[row].append(token)
            texts[row] = lm.tokenizer.decode(tokens[row], skip_special_tokens=False)
            if any(s in texts[row] for s in stop):
                continue
            keep.append(slot)
        if not keep or len(tokens[live[keep[0]]]) >= max_new_tokens:
            break
        if len(keep) < len(live):  # drop finished rows from the batch and the cache
            index = torch.tensor(keep, device=mask.device)
            cache.batch_select_indices(index)
            mask, next_pos, chosen = mask[index], next_pos[index], chosen[index]
            live = [live[k] for k in keep]
        mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=1)
        logits, out = forward_last(
            lm, {"input_ids": chosen[:, None], "attention_mask": mask, "position_ids": next_pos}, 1,
            past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        next_pos = next_pos + 1
    return [cut_at_stop(t, stop) for t in texts]


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    cut = len(text)
    for s in stop:
        at = text.find(s)
        if at != -1:
            cut = min(cut, at)
    return text[:cut]


@torch.no_grad()
def option_logprobs(lm, contexts: Sequence[list[int]], options: Sequence[Sequence[list[int]]], *,
                    soft: torch.Tensor | None = None, batch_size: int = 8, progress: Progress = None
                    ) -> list[list[float]]:
    """Summed log-probability of each option continuation after its context.

    Single-token options (MMLU letters) need one forward pass per item; longer options are scored
    as context+option sequences.
    """
    scores: list[list[float]] = [[] for _ in contexts]
    single = all(len(o) == 1 for opts in options for o in opts)
    if single:
        for batch in length_batches([len(c) for c in contexts], batch_size):
            logits, _ = forward_last(lm, build_inputs(lm, [contexts[i] for i in batch], soft), 1)
            logp = torch.log_softmax(logits[:, -1].float(), dim=-1)
            for slot, i in enumerate(batch):
                scores[i] = [float(logp[slot, o[0]]) for o in options[i]]
            if progress:
                progress(len(batch))
        return scores
    pairs = [(i, j) for i in range(len(contexts)) for j in range(len(options[i]))]
    for i in range(len(contexts)):
        scores[i] = [0.0] * len(options[i])
    seqs = [contexts[i] + list(options[i][j]) for i, j in pairs]
    for batch in length_batches([len(s) for s in seqs], batch_size):
        conts = [list(options[pairs[k][0]][pairs[k][1]]) for k in batch]
        values = continuation_logprobs(lm, [seqs[k] for k in batch], conts, soft)
        for k, value in zip(batch, values):
            i, j = pairs[k]
            scores[i][j] = float(value.sum())
        if progress:
            progress(len(batch))
    return scores


def continuation_logprobs(lm, seqs: Sequence[list[int]], conts: Sequence[list[int]],
                          soft: torch.Tensor | None) -> list[torch.Tensor]:
    """Per-token log-probabilities of each sequence's last ``len(cont)`` tokens (the continuation).

    Left padding aligns every sequence's end, so the head runs only on the last max(len)+1 positions.
    """
    keep = max(len(c) for c in conts) + 1
    logits, _ = forward_last(lm, build_inputs(lm, list(seqs), soft), keep)
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # position t predicts token t+1
    result = []
    for row, cont in enumerate(conts):
        span = logp[row, keep - 1 - len(cont):]
        result.append(span.gather(-1, torch.tensor(cont, device=span.device)[:, None]).squeeze(-1))
    return result


def target_loss(lm, prompts: Sequence[list[int]], targets: Sequence[list[int]], soft: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over target tokens only (prompt tokens carry no loss), with gradients
    flowing to the soft prompt; logits are computed only at the positions that predict targets."""
    seqs = [list(p) + list(t) for p, t in zip(prompts, targets)]
    keep = max(len(t) for t in targets) + 1
    logits, _ = forward_last(lm, build_inputs(lm, seqs, soft), keep)
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    total, count = logp.new_zeros(()), 0
    for row, tgt in enumerate(targets):
        span = logp[row, keep - 1 - len(tgt):]
        total = total - span.gather(-1, torch.tensor(tgt, device=span.device)[:, None]).sum()
        count += len(tgt)
    return total / count
