"""Log-likelihoods on a frozen model: the summed log-probability of each option after its context
(multiple-choice letters, cloze option texts) and per-token log-probabilities of continuations.

Three layouts, each checked against one sequence per option in the tests: single-token options from
one forward pass per item; each item's context run once with its options after its cache
(``grouped_option_logprobs``), side by side in one row under a block-causal mask where a per-model
probe shows the model takes custom attention masks (``block_options_usable``), else one row per
option; and context+option sequences (``continuation_logprobs``) where the grouped layout cannot be
used.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Sequence

import torch

from softeval.lm.batching import Progress, item_batches, length_batches, padding_groups
from softeval.lm.kv_cache import (
    SharedPrefix,
    batch_inputs,
    forward_last,
    full_attention,
    output_cache,
    plan_prefix,
)
from softeval.lm.memory import resolve_batch_size
from softeval.lm.models import LoadedModel
from softeval.lm.softprompt import layout_inputs


@torch.no_grad()
def option_logprobs(lm: LoadedModel, contexts: Sequence[list[int]], options: Sequence[Sequence[list[int]]], *,
                    soft: torch.Tensor | None = None, batch_size: int | str = 8, progress: Progress = None,
                    prefix_cache: bool | None = None, max_batch_size: int | None = None) -> list[list[float]]:
    """Summed log-probability of each option continuation after its context.

    Single-token options (MMLU letters) need one forward pass per item; longer options run after each
    context's cache (``grouped_option_logprobs``) or, where that layout cannot be used, as context+option
    sequences. The prefix shared by all contexts is computed once (see ``generation.GenerationSettings`` for
    ``prefix_cache`` and ``batch_size``).
    """
    if not contexts:
        return []
    n_soft = 0 if soft is None else soft.shape[0]
    if all(len(o) == 1 for opts in options for o in opts):
        prefix = plan_prefix(lm, contexts, soft, prefix_cache)
        size = resolve_batch_size(lm, batch_size, max(len(c) for c in contexts) + n_soft, max_batch_size)
        return _first_token_logprobs(lm, contexts, options, soft, prefix, size, progress)
    if prefix_cache is not False and grouped_usable(lm, contexts, options, n_soft):
        return grouped_option_logprobs(lm, contexts, options, soft=soft, batch_size=batch_size, progress=progress,
                                       prefix_cache=prefix_cache, max_batch_size=max_batch_size)
    return _sequence_logprobs(lm, contexts, options, soft, batch_size=batch_size, progress=progress,
                              prefix_cache=prefix_cache, max_batch_size=max_batch_size)


def _first_token_logprobs(lm: LoadedModel, contexts: Sequence[list[int]], options: Sequence[Sequence[list[int]]],
                          soft: torch.Tensor | None, prefix: SharedPrefix | None, size: int,
                          progress: Progress) -> list[list[float]]:
    """Single-token options: each item's from its context's last logits, in length batches of ``size``."""
    scores: list[list[float]] = [[] for _ in contexts]
    for batch in length_batches([len(c) for c in contexts], size):
        logits, _ = forward_last(lm, batch_inputs(lm, [contexts[i] for i in batch], soft, prefix), 1)
        logp = torch.log_softmax(logits[:, -1].float(), dim=-1)
        for slot, i in enumerate(batch):
            scores[i] = [float(logp[slot, o[0]]) for o in options[i]]
        if progress:
            progress(len(batch))
    return scores


def _sequence_logprobs(lm: LoadedModel, contexts: Sequence[list[int]], options: Sequence[Sequence[list[int]]],
                       soft: torch.Tensor | None, *, batch_size: int | str, progress: Progress,
                       prefix_cache: bool | None, max_batch_size: int | None) -> list[list[float]]:
    """Each option as a context+option sequence of its own (``continuation_logprobs``)."""
    pairs = [(i, j) for i in range(len(contexts)) for j in range(len(options[i]))]
    scores = [[0.0] * len(options[i]) for i in range(len(contexts))]
    seqs = [contexts[i] + list(options[i][j]) for i, j in pairs]
    conts_all = [list(options[i][j]) for i, j in pairs]
    prefix = plan_prefix(lm, seqs, soft, prefix_cache, reserve=[len(c) + 1 for c in conts_all])
    keep_max = max(len(c) for c in conts_all) + 1
    n_soft = 0 if soft is None else soft.shape[0]
    size = resolve_batch_size(lm, batch_size, max(len(s) for s in seqs) + n_soft, max_batch_size, keep=keep_max)
    for batch in length_batches([len(s) for s in seqs], size):
        values = continuation_logprobs(lm, [seqs[k] for k in batch], [conts_all[k] for k in batch], soft,
                                       prefix=prefix)
        for k, value in zip(batch, values):
            i, j = pairs[k]
            scores[i][j] = float(value.sum())
        if progress:
            progress(len(batch))
    return scores


def grouped_usable(lm: LoadedModel, contexts: Sequence[list[int]], options: Sequence[Sequence[list[int]]],
                   n_soft: int) -> bool:
    """Can the context of each item be run once and its cache shared by its options? Every context
    needs a token before its last one (or a soft prompt), and a model with sliding-window layers
    only when every sequence fits its window (the pads between context and option would otherwise
    count against the window)."""
    if any(len(c) < (1 if n_soft else 2) for c in contexts):
        return False
    if full_attention(lm.model):
        return True
    cfg = getattr(lm.model.config, "text_config", lm.model.config)
    window = getattr(cfg, "sliding_window", None)
    longest = max(len(c) + max((len(o) for o in opts), default=0) + 1 for c, opts in zip(contexts, options))
    return bool(window) and n_soft + longest < int(window)


@torch.no_grad()
def grouped_option_logprobs(lm: LoadedModel, contexts: Sequence[list[int]],
                            options: Sequence[Sequence[list[int]]], *, soft: torch.Tensor | None = None,
                            batch_size: int | str = 8, progress: Progress = None,
                            prefix_cache: bool | None = None,
                            max_batch_size: int | None = None) -> list[list[float]]:
    """``option_logprobs`` with each item's context run once for all its options.

    A batch of items runs its contexts (all but the last token; after the prefix every item shares,
    when there is one) with the cache kept; the cache rows are repeated once per option, and the
    options follow as ``[last context token][option]`` with their pads between context and option
    (attention mask 0, positions counted from the mask), so every option token sees exactly what it
    sees in ``[pads][soft][context][option]``. ``batch_size`` counts option rows.

    Where the model takes a custom attention mask (``block_options_usable``), an item's options run
    side by side in one row after its cache (``_block_option_logprobs``) instead of one row each
    with a copy of the item's cache rows: on 5-shot MMLU cloze (~1,000-token contexts) those copies
    were a third of the time and most of the phase's peak memory."""
    scores = [[0.0] * len(opts) for opts in options]
    n_soft = 0 if soft is None else soft.shape[0]
    per_row = _block_option_logprobs if block_options_usable(lm) else _row_option_logprobs
    heads = [list(c[:-1]) for c in contexts]
    prefix = plan_prefix(lm, heads, soft, prefix_cache) if all(heads) else None
    widths = [max(1, len(opts)) for opts in options]
    longest_opt = max((len(o) for opts in options for o in opts), default=0) + 1
    size = resolve_batch_size(lm, batch_size, max(len(c) for c in contexts) + n_soft + longest_opt,
                              max_batch_size, keep=longest_opt)
    for items in item_batches([len(c) for c in contexts], widths, max(size, max(widths))):
        inputs = batch_inputs(lm, [heads[i] for i in items], soft, prefix)
        _, out = forward_last(lm, inputs, 1, use_cache=True)
        if not any(len(options[i]) for i in items):
            continue
        suffixes = [[[contexts[i][-1], *o] for o in options[i]] for i in items]
        for i, values in zip(items, per_row(lm, output_cache(out), inputs["attention_mask"], suffixes)):
            scores[i] = values
        if progress:
            progress(len(items))
    return scores


def _row_option_logprobs(lm: LoadedModel, cache, past_mask: torch.Tensor,
                         suffixes: Sequence[Sequence[list[int]]]) -> list[list[float]]:
    """``_block_option_logprobs`` with one row per option: each option after a copy of its item's cache rows.

    Option rows of similar length run together (MMLU options run from 1 to 50+ tokens): each group pads only to
    its own longest row; each gets its items' context cache rows."""
    pairs = [(b, j) for b, segs in enumerate(suffixes) for j in range(len(segs))]
    flat = [suffixes[b][j] for b, j in pairs]
    out = [[0.0] * len(segs) for segs in suffixes]
    groups = padding_groups([len(x) for x in flat])
    for g, rows in enumerate(groups):
        part = cache if g == len(groups) - 1 else copy.deepcopy(cache)
        index = torch.tensor([pairs[r][0] for r in rows], device=past_mask.device)
        part.batch_select_indices(index)
        width = max(len(flat[r]) for r in rows)
        logits, _ = forward_last(lm, layout_inputs(lm, [flat[r] for r in rows], past_mask=past_mask[index]),
                                 width, cache=part)
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        for slot, r in enumerate(rows):
            b, j = pairs[r]
            cont = list(flat[r][1:])
            if cont:
                span = logp[slot, width - 1 - len(cont):]
                picked = span.gather(-1, torch.tensor(cont, device=span.device)[:, None])
                out[b][j] = float(picked.sum())
    return out


def _block_option_logprobs(lm: LoadedModel, cache, past_mask: torch.Tensor,
                           suffixes: Sequence[Sequence[list[int]]]) -> list[list[float]]:
    """Log-probabilities of each item's options, all options of an item in one row after its cached
    context (``cache``, ``past_mask`` [B, P]: one row per item).

    ``suffixes[b]`` are item b's ``[last context token][option]`` sequences; they are laid side by
    side in row b (right-padded) with a block-causal mask: a token sees the item's cached columns
    and the earlier tokens of its own option only, and its position continues the context's, as in
    ``[pads][soft][context][option]`` alone. Returns per item the summed log-probability of each
    option's tokens (the first token of a suffix is the context's, not scored)."""
    device = past_mask.device
    rows, width, cached = len(suffixes), max(1, max(sum(map(len, s)) for s in suffixes)), past_mask.shape[1]
    ids = torch.full((rows, width), lm.pad_id, dtype=torch.long)
    positions = torch.zeros((rows, width), dtype=torch.long)
    allowed = torch.zeros((rows, 1, width, cached + width), dtype=torch.bool)
    seen = past_mask.bool().cpu()
    starts: list[list[int]] = []
    for b, segs in enumerate(suffixes):
        at, context_len = 0, int(seen[b].sum())
        starts.append([])
        for seg in segs:
            n = len(seg)
            ids[b, at:at + n] = torch.tensor(list(seg), dtype=torch.long)
            positions[b, at:at + n] = torch.arange(context_len, context_len + n)
            allowed[b, 0, at:at + n, :cached] = seen[b]
            allowed[b, 0, at:at + n, cached + at:cached + at + n] = torch.ones(n, n, dtype=torch.bool).tril()
            starts[-1].append(at)
            at += n
        pad = torch.arange(at, width)
        allowed[b, 0, pad, cached + pad] = True  # pads see themselves only (no row without a key)
    embeds = lm.model.get_input_embeddings()(ids.to(device))
    mask = torch.zeros(allowed.shape, dtype=embeds.dtype).masked_fill_(~allowed, torch.finfo(embeds.dtype).min)
    logits, _ = forward_last(lm, {"inputs_embeds": embeds, "attention_mask": mask.to(device),
                                  "position_ids": positions.to(device)}, width, cache=cache)
    where = [(b, at + t, tok) for b, segs in enumerate(suffixes) for seg, at in zip(segs, starts[b])
             for t, tok in enumerate(seg[1:])]
    out = [[0.0] * len(segs) for segs in suffixes]
    if not where:
        return out
    index = torch.tensor([(b, p) for b, p, _ in where], device=logits.device)
    logp = torch.log_softmax(logits[index[:, 0], index[:, 1]].float(), dim=-1)
    picked = logp.gather(-1, torch.tensor([tok for _, _, tok in where],
                                          device=logp.device)[:, None]).squeeze(-1).tolist()
    k = 0
    for b, segs in enumerate(suffixes):
        for j, seg in enumerate(segs):
            out[b][j] = float(sum(picked[k:k + len(seg) - 1]))
            k += len(seg) - 1
    return out


_BLOCK_OPTIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
BLOCK_OPTIONS = True  # False: always one row per option (benchmarks compare the two)


def block_options_usable(lm: LoadedModel) -> bool:
    """Does the model score options laid side by side under a custom 4D attention mask exactly as
    it scores them one row each? Checked once per model on a small probe (an attention
    implementation that ignores or rejects custom masks fails it and keeps one row per option).
    Full-attention models only: a row of all options may outgrow a sliding window that each option
    alone fits (``grouped_usable``)."""
    if not BLOCK_OPTIONS or not full_attention(lm.model):
        return False
    model = lm.model
    if model not in _BLOCK_OPTIONS:
        _BLOCK_OPTIONS[model] = _block_probe(lm)
    return _BLOCK_OPTIONS[model]


def _block_probe(lm: LoadedModel) -> bool:
    vocab = lm.model.get_input_embeddings().weight.shape[0]
    tok = [t % vocab for t in range(3, 40)]
    contexts = [tok[:7], tok[5:9]]
    options = [[tok[10:11], tok[11:14], tok[20:22]], [tok[30:33], tok[1:2]]]
    heads = [c[:-1] for c in contexts]
    try:
        with torch.no_grad():
            inputs = layout_inputs(lm, heads, None)
            _, out = forward_last(lm, inputs, 1, use_cache=True)
            mine = _block_option_logprobs(lm, output_cache(out), inputs["attention_mask"],
                                          [[[c[-1], *o] for o in opts] for c, opts in zip(contexts, options)])
            theirs = [[float(continuation_logprobs(lm, [c + o], [o], None)[0].sum()) for o in opts]
                      for c, opts in zip(contexts, options)]
    except Exception:  # whatever a model raises on a custom mask, the proven layout is kept
        return False
    a = torch.tensor([x for r in mine for x in r])
    b = torch.tensor([x for r in theirs for x in r])
    return bool(torch.isfinite(a).all()) and torch.allclose(a, b, rtol=1e-3, atol=1e-3 * max(1.0, float(b.abs().max())))


def continuation_logprobs(lm: LoadedModel, seqs: Sequence[list[int]], conts: Sequence[list[int]],
                          soft: torch.Tensor | None, prefix: SharedPrefix | None = None) -> list[torch.Tensor]:
    """Per-token log-probabilities of each sequence's last ``len(cont)`` tokens (the continuation).

    Left padding aligns every sequence's end, so the head runs only on the last max(len)+1 positions.
    With a ``prefix`` every sequence must keep more than ``len(cont)`` tokens after it.
    """
    keep = max(len(c) for c in conts) + 1
    logits, _ = forward_last(lm, batch_inputs(lm, seqs, soft, prefix), keep)
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # position t predicts token t+1
    result = []
    for row, cont in enumerate(conts):
        span = logp[row, keep - 1 - len(cont):]
        result.append(span.gather(-1, torch.tensor(cont, device=span.device)[:, None]).squeeze(-1))
    return result
