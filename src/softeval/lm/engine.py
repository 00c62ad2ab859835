"""Batched greedy generation, option log-likelihoods and the tuning loss, on a frozen model.

Every entry point takes token-id sequences (already templated) and an optional soft prompt and goes
through ``build_inputs``, so zero-shot, few-shot and soft-prompt share one path. Batches are
grouped by length (fewer pads) and results come back in the caller's order.

Speed paths (each checked against the plain path in tests/test_engine_speed_paths.py):

- shared prefix: the token prefix every sequence of a call shares (a chat template's fixed head,
  the instruction, the few-shot block), with the soft prompt in front of it, is run through the
  model once; its KV cache is expanded to every batch. The per-item suffixes follow it with their
  pads *between* prefix and suffix (attention mask 0, position ids counted from the mask), so every
  real token sees exactly the context and positions it has in the plain left-padded layout
  ``[pads][soft][prefix][suffix]``.
- generation drops finished rows from the batch and the KV cache and checks stop strings on the
  decoded tail of each row only (one full decode per row at the end).
- on CPU, generation computes the linear layers' few-row products (decoding steps, the head on the
  last positions) as ``W @ x^T``, which MKL streams from memory up to twice as fast as ``x @ W^T``
  (``softeval.lm.skinny``; same outputs).
- a plain (full-attention) KV cache grows in place (``GrowingLayer``: a buffer with spare room,
  doubled when full) instead of concatenating the whole cache at every decoding step.
- option scoring runs an item's context once and its options side by side in one row after that
  cache, under a block-causal mask (no copy of the context's cache per option), where a per-model
  probe shows the model takes custom attention masks; else one row per option.
- tuning runs the vocabulary head only at the positions that predict a target token (gathered
  across rows), not on rows x longest target: GSM8K and MATH targets range from a few to hundreds
  of tokens, and a big-vocabulary head costs more per position than the rest of a small model.
- tuning splits a batch into forward passes that fit a memory budget (shortest rows together) and
  accumulates their gradients: the same gradient as one pass, a fraction of the memory.
- ``batch_size=0`` (or ``"auto"``) picks a batch size that fits the free memory (CPU or CUDA),
  never above ``max_batch_size``.
"""

from __future__ import annotations

import copy
import ctypes
import functools
import gc
import inspect
import weakref
from collections.abc import Callable, Sequence

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from softeval.lm.models import end_of_turn_id
from softeval.lm.skinny import skinny_linears
from softeval.lm.softprompt import build_inputs, layout_inputs

Progress = Callable[[int], None] | None

MIN_PREFIX = 8  # shared prefix (soft prompt + tokens) shorter than this is not worth a cache
DEFAULT_MAX_BATCH = 64


def length_batches(lengths: Sequence[int], batch_size: int, max_padding: float | None = None) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first, so memory peaks early). With
    ``max_padding``, a batch also closes before its padded tokens (rows x its longest) would exceed
    ``max_padding`` x its real ones (16 random MMLU prompts in one batch: 2.6x)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    if max_padding is None:
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    return _pack(order, lambda g, i: len(g) < batch_size
                 and (len(g) + 1) * lengths[g[0]] <= max_padding * (sum(lengths[j] for j in g) + lengths[i]))


@functools.cache
def _forward_params(model_class: type) -> frozenset[str]:
    return frozenset(inspect.signature(model_class.forward).parameters)


def _cache_kwarg(model) -> str:
    """The forward argument that takes a KV cache: ``cache`` in later transformers 5 releases,
    ``past_key_values`` before (still accepted there, with a deprecation warning)."""
    return "cache" if "cache" in _forward_params(type(model)) else "past_key_values"


def output_cache(out):
    """The KV cache a forward pass returned, under either of its names."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


def forward_last(lm, inputs: dict, keep: int, *, cache=None, use_cache: bool = False):
    """Forward pass that computes the vocabulary head only on the last ``keep`` positions,
    continuing ``cache`` (or ``inputs["cache"]``) if given; ``output_cache(out)`` is the cache after it."""
    inputs = dict(inputs)
    cache = inputs.pop("cache", cache)
    kwargs = {"use_cache": use_cache or cache is not None}
    if cache is not None:
        kwargs[_cache_kwarg(lm.model)] = cache
    if "logits_to_keep" in _forward_params(type(lm.model)):
        kwargs["logits_to_keep"] = keep
    out = lm.model(**inputs, **kwargs)
    return out.logits[:, -keep:], out


# ---- automatic batch size -----------------------------------------------------------------------

def _free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:  # pragma: no cover - psutil is a dependency of accelerate
        import os

        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def release_freed_memory() -> None:
    """Hand the memory that the last phase freed back to the system. glibc's malloc keeps freed blocks
    in its arenas, so without this each method's peak stacks on the leftovers of the one before it: the
    main job at --limit 40 peaked at 3.07 GB RSS without it, 2.76 GB with it after each method (its
    few-shot phase alone: 2.57 GB at --limit 100). A no-op where the C library has no malloc_trim."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):  # not glibc (macOS, Windows, musl)
        return None


def bytes_per_row(lm, seq_len: int, *, keep: int = 1, new_tokens: int = 0, training: bool = False) -> int:
    """Rough upper estimate of the memory one batch row needs: KV cache, the widest activations
    (MLP and attention scores) and the vocabulary logits; tuning keeps every layer's activations."""
    cfg = getattr(lm.model.config, "text_config", lm.model.config)
    hidden = int(getattr(cfg, "hidden_size", 1024))
    layers = int(getattr(cfg, "num_hidden_layers", 24))
    heads = int(getattr(cfg, "num_attention_heads", 16))
    kv_heads = int(getattr(cfg, "num_key_value_heads", heads) or heads)
    head_dim = int(getattr(cfg, "head_dim", 0) or hidden // heads)
    inter = int(getattr(cfg, "intermediate_size", 4 * hidden))
    vocab = int(getattr(cfg, "vocab_size", 32000))
    width = lm.model.get_input_embeddings().weight.element_size()
    total = seq_len + new_tokens
    kv = 2 * layers * kv_heads * head_dim * total * width
    act = (4 * hidden + 3 * inter) * total * width + heads * total * total * width
    if training:
        act *= layers
    logits = 3 * keep * vocab * 4  # logits, float copy, log_softmax
    return int(kv + act + logits)


def auto_batch_size(lm, seq_len: int, *, max_batch_size: int = DEFAULT_MAX_BATCH, keep: int = 1,
                    new_tokens: int = 0, training: bool = False, fraction: float = 0.5) -> int:
    """Largest batch (1..max_batch_size) whose estimated memory fits ``fraction`` of the free memory
    of the model's device (CUDA: ``mem_get_info``; CPU: available RAM)."""
    per_row = max(1, bytes_per_row(lm, seq_len, keep=keep, new_tokens=new_tokens, training=training))
    fits = int(_free_bytes(lm.device) * fraction) // per_row
    return max(1, min(int(max_batch_size), fits))


def _resolve_batch_size(lm, batch_size, seq_len: int, max_batch_size: int | None, **kw) -> int:
    bound = int(max_batch_size or DEFAULT_MAX_BATCH)
    if batch_size in (0, None, "auto"):
        return auto_batch_size(lm, seq_len, max_batch_size=bound, **kw)
    return max(1, min(int(batch_size), bound) if max_batch_size else int(batch_size))


# ---- shared prefix ------------------------------------------------------------------------------

def common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix all sequences share."""
    if not seqs:
        return 0
    first, n = seqs[0], min(len(s) for s in seqs)
    for s in seqs[1:]:
        k = 0
        while k < n and s[k] == first[k]:
            k += 1
        n = k
        if n == 0:
            break
    return n


GROWING_CACHE = True  # False: transformers' DynamicCache (a torch.cat of the whole cache per step)


class GrowingLayer(DynamicLayer):
    """A full-attention cache layer that writes new keys and values in place into a buffer with
    spare room (doubled when full) instead of concatenating the whole cache at every step;
    ``keys`` / ``values`` are views of the filled part."""

    def __init__(self):
        super().__init__()
        self._k = self._v = None

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:  # (lazy_initialization's signature differs between 4.x and 5.x)
            self.dtype, self.device = key_states.dtype, key_states.device
            self.keys, self.values = key_states[..., :0, :], value_states[..., :0, :]
            self.is_initialized = True
        n, add = self.get_seq_length(), key_states.shape[-2]
        if self._k is None or n + add > self._k.shape[-2]:
            room = max(n + add, 2 * n, 64)
            k = key_states.new_empty((*key_states.shape[:2], room, key_states.shape[-1]))
            v = value_states.new_empty((*value_states.shape[:2], room, value_states.shape[-1]))
            if n:
                k[:, :, :n], v[:, :, :n] = self.keys, self.values
            self._k, self._v = k, v
        self._k[:, :, n:n + add] = key_states
        self._v[:, :, n:n + add] = value_states
        self.keys, self.values = self._k[:, :, :n + add], self._v[:, :, :n + add]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self._k is not None:
            n = self.get_seq_length()
            self._k, self._v = self._k[indices], self._v[indices]
            self.keys, self.values = self._k[:, :, :n], self._v[:, :, :n]


def full_attention(model) -> bool:
    """True when every layer attends to the whole context (no sliding window layers)."""
    cfg = getattr(model.config, "text_config", model.config)
    return not (getattr(cfg, "sliding_window", None)
                or any("sliding" in str(t) for t in getattr(cfg, "layer_types", None) or ()))


def growing_cache(pairs) -> Cache:
    """A cache of ``GrowingLayer``s holding the given per-layer ``(keys, values)``."""
    cache = Cache(layer_class_to_replicate=GrowingLayer)
    for idx, (k, v) in enumerate(pairs):
        cache.update(k, v, idx)
    return cache


def to_growing(cache):
    """The same keys and values in a ``growing_cache`` when ``cache`` is a plain ``DynamicCache``
    (what the model made for itself on the prefill), so decoding writes in place. Any other cache
    (sliding-window layers, hybrid or recurrent models, legacy tuples) is returned as it is."""
    if not GROWING_CACHE or type(cache) is not DynamicCache or not _plain_layers(cache):
        return cache
    if not all(layer.is_initialized for layer in cache.layers):
        return cache
    return growing_cache((layer.keys, layer.values) for layer in cache.layers)


def _plain_layers(cache) -> bool:
    """Every layer of ``cache`` is a plain ``DynamicLayer`` (no sliding window, no recurrent state)."""
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def _cache_is_plain(model, cache) -> bool:
    """Only plain (full attention) dynamic caches can be expanded and shared safely."""
    if not full_attention(model):
        return False
    if getattr(cache, "layers", None) is not None:
        return _plain_layers(cache)
    return hasattr(cache, "key_cache")


class SharedPrefix:
    """KV cache of ``[soft prompt][prefix tokens]``, computed once, batch 1."""

    def __init__(self, lm, ids: Sequence[int], soft: torch.Tensor | None):
        self.ids = list(ids)
        self.n_soft = 0 if soft is None else soft.shape[0]
        self.length = self.n_soft + len(self.ids)
        _, out = forward_last(lm, build_inputs(lm, [self.ids], soft), 1, use_cache=True)
        cache = output_cache(out)
        self.usable = _cache_is_plain(lm.model, cache)
        if hasattr(cache, "layers"):
            self.kv = [(layer.keys, layer.values) for layer in cache.layers]
        elif hasattr(cache, "key_cache"):
            self.kv = list(zip(cache.key_cache, cache.value_cache))
        else:  # legacy tuple
            self.kv = [tuple(layer[:2]) for layer in cache]

    def expanded(self, batch: int):
        """The prefix's cache for ``batch`` rows (only made for plain full-attention caches)."""
        legacy = tuple((k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)) for k, v in self.kv)
        return growing_cache(legacy) if GROWING_CACHE else DynamicCache(legacy)


def plan_prefix(lm, seqs: Sequence[Sequence[int]], soft: torch.Tensor | None, use: bool | None,
                reserve: Sequence[int] | None = None) -> SharedPrefix | None:
    """The shared prefix to cache for ``seqs``, or None when it would not pay (or cannot be used).

    Every sequence keeps at least one token (``reserve[i]`` tokens if given) after the prefix."""
    if use is False or not seqs:
        return None
    n = common_prefix_len(seqs)
    room = min(len(s) - (reserve[i] if reserve else 1) for i, s in enumerate(seqs))
    n = max(0, min(n, room))
    n_soft = 0 if soft is None else soft.shape[0]
    if n + n_soft < (1 if use else MIN_PREFIX) or (n == 0 and n_soft == 0):
        return None
    prefix = SharedPrefix(lm, seqs[0][:n], soft)
    return prefix if prefix.usable else None


def suffix_inputs(lm, prefix: SharedPrefix, suffixes: Sequence[Sequence[int]]) -> dict:
    """Inputs for the per-item parts after a cached prefix: ``[prefix][pads][suffix]``.

    The attention mask covers prefix and suffix columns (pads 0); position ids count attended
    tokens, so each suffix continues at ``prefix.length`` exactly as it would without pads."""
    past = torch.ones((len(suffixes), prefix.length), dtype=torch.long)
    return {**layout_inputs(lm, suffixes, past_mask=past), "cache": prefix.expanded(len(suffixes))}


def _batch_inputs(lm, seqs: Sequence[list[int]], soft, prefix: SharedPrefix | None) -> dict:
    if prefix is None:
        return build_inputs(lm, list(seqs), soft)
    n = len(prefix.ids)
    return suffix_inputs(lm, prefix, [s[n:] for s in seqs])


# ---- generation ---------------------------------------------------------------------------------

@torch.no_grad()
def generate(lm, seqs: Sequence[list[int]], *, soft: torch.Tensor | None = None, max_new_tokens: int = 32,
             stop: Sequence[str] = (), batch_size: int | str = 8, progress: Progress = None,
             prefix_cache: bool | None = None, max_batch_size: int | None = None,
             on_first_logprobs: Callable[[list[int], torch.Tensor], None] | None = None,
             hit_limit: list[bool] | None = None, targets: Sequence[list[int]] | None = None,
             target_nll: list[float] | None = None, max_padding: float | None = None) -> list[str]:
    """Greedy continuation of each sequence, cut at the first stop string or EOS.

    ``hit_limit``: a list that gets, per sequence, whether it ran out of ``max_new_tokens`` before a
    stop string or EOS ended it (the output may be cut off).

    ``targets`` with ``target_nll``: the list gets, per sequence, the summed negative log-likelihood
    of its target continuation, read from the generation's own prefill (its cache and first-token
    log-probabilities) instead of a second pass over the prompt (a tuning curve point's held-out
    loss: ``target_loss_value`` = the sum over items / their target tokens).

    ``on_first_logprobs(indices, logprobs)``: called per batch with the items' indices and the
    log-probabilities [batch, vocab] of the first generated token, so single-token option scores
    (MMLU letters) come from the same forward pass as the generation instead of a second one.

    ``prefix_cache``: None (default) caches the shared prefix when it is at least ``MIN_PREFIX``
    long, True whenever there is one, False never. ``batch_size`` 0 or "auto": fit memory, at most
    ``max_batch_size``; ``max_padding``: see ``length_batches``."""
    outputs: list[str] = [""] * len(seqs)
    limited = [False] * len(seqs)
    if hit_limit is not None:
        hit_limit[:] = limited
    if target_nll is None:
        targets = None
    else:
        target_nll[:] = [0.0] * len(seqs)
    if not seqs:
        return outputs
    n_soft = 0 if soft is None else soft.shape[0]
    if targets is not None and not grouped_usable(lm, seqs, [[t] for t in targets], n_soft):
        # a sliding-window model whose window the pads before the targets could overrun: a pass of its own
        target_nll[:] = [-row[0] for row in option_logprobs(lm, seqs, [[t] for t in targets], soft=soft,
                                                              batch_size=batch_size)]
        targets = None
    prefix = plan_prefix(lm, seqs, soft, prefix_cache)
    size = _resolve_batch_size(lm, batch_size, max(len(s) for s in seqs) + n_soft, max_batch_size,
                               new_tokens=max_new_tokens)
    with skinny_linears(lm.model):  # decoding steps multiply few rows: W @ x^T on CPU (softeval.lm.skinny)
        for batch in length_batches([len(s) for s in seqs], size, max_padding):
            first = (lambda logp, b=batch: on_first_logprobs(b, logp)) if on_first_logprobs else None
            nll: list[float] = []
            texts, hit = _generate_batch(lm, [seqs[i] for i in batch], soft, max_new_tokens, stop, prefix, first,
                                         [targets[i] for i in batch] if targets is not None else None, nll)
            for i, text, cut in zip(batch, texts, hit):
                outputs[i], limited[i] = text, cut
            if targets is not None:
                for i, value in zip(batch, nll):
                    target_nll[i] = value
            if progress:
                progress(len(batch))
    if hit_limit is not None:
        hit_limit[:] = limited
    return outputs


def _stop_window(lm, stop: Sequence[str]) -> int:
    """How many trailing tokens to decode to see any stop string appear (each token decodes to at
    least one character, plus a margin for tokenizers that strip a leading space on decode)."""
    return max((len(s) for s in stop), default=0) + 4


def _generate_batch(lm, seqs, soft, max_new_tokens, stop, prefix: SharedPrefix | None = None,
                    on_first=None, targets=None, nll: list[float] | None = None) -> tuple[list[str], list[bool]]:
    """Outputs of one batch, and per row whether it ran out of tokens (no stop string, no EOS);
    with ``targets``, ``nll`` gets each row's target negative log-likelihood (``_targets_nll``)."""
    inputs = _batch_inputs(lm, seqs, soft, prefix)
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
    if targets is not None:
        nll[:] = _targets_nll(lm, logits, output_cache(out), mask, targets)
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
    return ([cut_at_stop(decode(t, skip_special_tokens=False), stop) for t in tokens],
            [row not in ended and max_new_tokens > 0 for row in range(len(seqs))])


def _targets_nll(lm, logits: torch.Tensor, cache, mask: torch.Tensor, targets) -> list[float]:
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


def end_markers(lm) -> tuple[str, ...]:
    """Texts of the end tokens (EOS ids, the chat template's end of turn): outputs are decoded with
    special tokens kept, and a model may also spell a marker out in ordinary tokens; either way the
    answer ends there instead of failing the strict format with ``B<|im_end|>``."""
    ids = set(lm.eos_ids or ())
    end = end_of_turn_id(lm.tokenizer)
    if end is not None:
        ids.add(end)
    texts = (lm.tokenizer.decode([i], skip_special_tokens=False) for i in sorted(ids))
    return tuple(t for t in texts if t.strip())


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    cut = len(text)
    for s in stop:
        at = text.find(s)
        if at != -1:
            cut = min(cut, at)
    return text[:cut]


# ---- log-likelihood -----------------------------------------------------------------------------

@torch.no_grad()
def option_logprobs(lm, contexts: Sequence[list[int]], options: Sequence[Sequence[list[int]]], *,
                    soft: torch.Tensor | None = None, batch_size: int | str = 8, progress: Progress = None,
                    prefix_cache: bool | None = None, max_batch_size: int | None = None) -> list[list[float]]:
    """Summed log-probability of each option continuation after its context.

    Single-token options (MMLU letters) need one forward pass per item; longer options are scored
    as context+option sequences. The prefix shared by all contexts is computed once (see
    ``generate`` for ``prefix_cache`` and ``batch_size``).
    """
    scores: list[list[float]] = [[] for _ in contexts]
    if not contexts:
        return scores
    single = all(len(o) == 1 for opts in options for o in opts)
    n_soft = 0 if soft is None else soft.shape[0]
    if single:
        prefix = plan_prefix(lm, contexts, soft, prefix_cache)
        size = _resolve_batch_size(lm, batch_size, max(len(c) for c in contexts) + n_soft, max_batch_size)
        for batch in length_batches([len(c) for c in contexts], size):
            logits, _ = forward_last(lm, _batch_inputs(lm, [contexts[i] for i in batch], soft, prefix), 1)
            logp = torch.log_softmax(logits[:, -1].float(), dim=-1)
            for slot, i in enumerate(batch):
                scores[i] = [float(logp[slot, o[0]]) for o in options[i]]
            if progress:
                progress(len(batch))
        return scores
    if prefix_cache is not False and grouped_usable(lm, contexts, options, n_soft):
        return grouped_option_logprobs(lm, contexts, options, soft=soft, batch_size=batch_size, progress=progress,
                                       prefix_cache=prefix_cache, max_batch_size=max_batch_size)
    pairs = [(i, j) for i in range(len(contexts)) for j in range(len(options[i]))]
    for i in range(len(contexts)):
        scores[i] = [0.0] * len(options[i])
    seqs = [contexts[i] + list(options[i][j]) for i, j in pairs]
    conts_all = [list(options[i][j]) for i, j in pairs]
    prefix = plan_prefix(lm, seqs, soft, prefix_cache, reserve=[len(c) + 1 for c in conts_all])
    keep_max = max(len(c) for c in conts_all) + 1
    size = _resolve_batch_size(lm, batch_size, max(len(s) for s in seqs) + n_soft, max_batch_size, keep=keep_max)
    for batch in length_batches([len(s) for s in seqs], size):
        values = continuation_logprobs(lm, [seqs[k] for k in batch], [conts_all[k] for k in batch], soft,
                                       prefix=prefix)
        for k, value in zip(batch, values):
            i, j = pairs[k]
            scores[i][j] = float(value.sum())
        if progress:
            progress(len(batch))
    return scores


def grouped_usable(lm, contexts: Sequence[list[int]], options: Sequence[Sequence[list[int]]], n_soft: int) -> bool:
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


def padding_groups(lengths: Sequence[int], max_ratio: float = 1.25) -> list[list[int]]:
    """Rows (indices) cut into groups, longest first, so that each group's padded tokens (rows x its
    longest row) stay within ``max_ratio`` of its real ones (a row that alone breaks that starts a
    new group)."""
    return length_batches(lengths, max(1, len(lengths)), max_padding=max_ratio)


def _pack(order: Sequence[int], fits: Callable[[list[int], int], bool]) -> list[list[int]]:
    """Indices in ``order`` cut greedily into groups: each joins the current group when ``fits(group,
    index)``, else starts a new one (every group holds at least one index)."""
    groups: list[list[int]] = []
    for i in order:
        if groups and fits(groups[-1], i):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups

def _item_batches(lengths: Sequence[int], widths: Sequence[int], rows: int) -> list[list[int]]:
    """Items (longest first) packed into batches of at most ``rows`` option rows (at least one item)."""
    return _pack(sorted(range(len(lengths)), key=lambda i: -lengths[i]),
                 lambda g, i: sum(widths[j] for j in g) + widths[i] <= rows)

@torch.no_grad()
def grouped_option_logprobs(lm, contexts: Sequence[list[int]], options: Sequence[Sequence[list[int]]], *,
                            soft: torch.Tensor | None = None, batch_size: int | str = 8, progress: Progress = None,
                            prefix_cache: bool | None = None, max_batch_size: int | None = None) -> list[list[float]]:
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
    block_options = block_options_usable(lm)
    heads = [list(c[:-1]) for c in contexts]
    prefix = plan_prefix(lm, heads, soft, prefix_cache) if all(heads) else None
    widths = [max(1, len(opts)) for opts in options]
    longest_opt = max((len(o) for opts in options for o in opts), default=0) + 1
    size = _resolve_batch_size(lm, batch_size, max(len(c) for c in contexts) + n_soft + longest_opt,
                               max_batch_size, keep=longest_opt)
    for items in _item_batches([len(c) for c in contexts], widths, max(size, max(widths))):
        inputs = _batch_inputs(lm, [heads[i] for i in items], soft, prefix)
        _, out = forward_last(lm, inputs, 1, use_cache=True)
        mask = inputs["attention_mask"]
        pairs = [(b, j) for b, i in enumerate(items) for j in range(len(options[i]))]
        if not pairs:
            continue
        cache = output_cache(out)
        if block_options:
            rows = [[[contexts[i][-1], *o] for o in options[i]] for i in items]
            for i, values in zip(items, _block_option_logprobs(lm, cache, mask, rows)):
                scores[i] = values
            if progress:
                progress(len(items))
            continue
        suffixes = [[contexts[items[b]][-1], *options[items[b]][j]] for b, j in pairs]
        groups = padding_groups([len(x) for x in suffixes])
        for g, rows in enumerate(groups):
            # Option rows of similar length together (MMLU options run from 1 to 50+ tokens): each group
            # pads only to its own longest row; each gets its items' context cache rows.
            part = cache if g == len(groups) - 1 else copy.deepcopy(cache)
            index = torch.tensor([pairs[r][0] for r in rows], device=mask.device)
            part.batch_select_indices(index)
            width = max(len(suffixes[r]) for r in rows)
            logits, _ = forward_last(lm, layout_inputs(lm, [suffixes[r] for r in rows], past_mask=mask[index]),
                                     width, cache=part)
            logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
            for slot, r in enumerate(rows):
                b, j = pairs[r]
                cont = list(options[items[b]][j])
                if cont:
                    span = logp[slot, width - 1 - len(cont):]
                    picked = span.gather(-1, torch.tensor(cont, device=span.device)[:, None])
                    scores[items[b]][j] = float(picked.sum())
        if progress:
            progress(len(items))
    return scores


def _block_option_logprobs(lm, cache, past_mask: torch.Tensor, suffixes: Sequence[Sequence[list[int]]]) -> list[list[float]]:
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
    picked = logp.gather(-1, torch.tensor([tok for _, _, tok in where], device=logp.device)[:, None]).squeeze(-1).tolist()
    k = 0
    for b, segs in enumerate(suffixes):
        for j, seg in enumerate(segs):
            out[b][j] = float(sum(picked[k:k + len(seg) - 1]))
            k += len(seg) - 1
    return out


_BLOCK_OPTIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
BLOCK_OPTIONS = True  # False: always one row per option (benchmarks compare the two)


def block_options_usable(lm) -> bool:
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


def _block_probe(lm) -> bool:
    vocab = lm.model.get_input_embeddings().weight.shape[0]
    tok = [t % vocab for t in range(3, 40)]
    contexts = [tok[:7], tok[5:9]]
    options = [[tok[10:11], tok[11:14], tok[20:22]], [tok[30:33], tok[1:2]]]
    heads = [c[:-1] for c in contexts]
    try:
        with torch.no_grad():
            inputs = build_inputs(lm, heads, None)
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


def continuation_logprobs(lm, seqs: Sequence[list[int]], conts: Sequence[list[int]],
                          soft: torch.Tensor | None, prefix: SharedPrefix | None = None) -> list[torch.Tensor]:
    """Per-token log-probabilities of each sequence's last ``len(cont)`` tokens (the continuation).

    Left padding aligns every sequence's end, so the head runs only on the last max(len)+1 positions.
    With a ``prefix`` every sequence must keep more than ``len(cont)`` tokens after it.
    """
    keep = max(len(c) for c in conts) + 1
    logits, _ = forward_last(lm, _batch_inputs(lm, seqs, soft, prefix), keep)
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # position t predicts token t+1
    result = []
    for row, cont in enumerate(conts):
        span = logp[row, keep - 1 - len(cont):]
        result.append(span.gather(-1, torch.tensor(cont, device=span.device)[:, None]).squeeze(-1))
    return result


# ---- tuning ------------------------------------------------------------------------------------

def target_loss(lm, prompts: Sequence[list[int]], targets: Sequence[list[int]], soft: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over target tokens only (prompt tokens carry no loss), with gradients
    flowing to the soft prompt. The vocabulary head runs only at the positions that predict a target
    token (``target_head``); a model whose head cannot be run apart from its body gets the head on
    the last max(len(target))+1 positions of every row instead."""
    seqs = [list(p) + list(t) for p, t in zip(prompts, targets)]
    n_targets = sum(len(t) for t in targets)
    head = target_head(lm)
    if head is None:
        per_token = continuation_logprobs(lm, seqs, targets, soft)
        return -torch.cat(per_token).sum() / n_targets
    hidden = lm.model.get_decoder()(**build_inputs(lm, seqs, soft)).last_hidden_state
    width = hidden.shape[1]  # left padded: every row ends at the last position
    rows = torch.cat([torch.full((len(t),), r) for r, t in enumerate(targets)]).to(hidden.device)
    cols = torch.cat([torch.arange(width - 1 - len(t), width - 1) for t in targets]).to(hidden.device)
    logits = head(hidden[rows, cols])
    labels = torch.tensor([tok for t in targets for tok in t], device=logits.device)
    return torch.nn.functional.cross_entropy(logits.float(), labels, reduction="sum") / n_targets


_TARGET_HEADS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def target_head(lm) -> Callable[[torch.Tensor], torch.Tensor] | None:
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


def _checked_head(lm):
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

    probe = build_inputs(lm, [list(range(min(8, out_embed.weight.shape[0])))], None)
    try:
        with torch.no_grad():
            mine = head(decoder(**probe).last_hidden_state).float()
            theirs = model(**probe).logits.float()
    except (TypeError, ValueError, RuntimeError, AttributeError):
        return None
    same = mine.shape == theirs.shape and torch.allclose(mine, theirs, rtol=1e-3, atol=1e-3 * float(theirs.abs().max()))
    return head if same else None


def tuning_passes(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Split one tuning batch into forward passes of at most ``max_tokens`` padded tokens (rows x
    longest row; a single longer row gets a pass of its own). Rows are taken shortest first, so
    each pass pads only to rows of similar length."""
    return _pack(sorted(range(len(lengths)), key=lambda i: (lengths[i], i)),
                 lambda g, i: (len(g) + 1) * lengths[i] <= max_tokens)

# Memory one tuning forward pass may hold on CPU (activations kept for backward); on CUDA a
# fraction of the free device memory.
CPU_TUNING_PASS_BYTES = 1 << 30


def tuning_pass_tokens(lm, fraction: float = 0.4) -> int:
    """Padded tokens per tuning forward pass that fit the memory budget (estimate of
    ``bytes_per_row`` with every layer's activations kept)."""
    per_token = max(1, bytes_per_row(lm, 512, keep=0, training=True) // 512)  # head: target positions only
    budget = _free_bytes(lm.device) * fraction if lm.device.type == "cuda" else CPU_TUNING_PASS_BYTES
    return max(1, int(budget // per_token))


def target_loss_backward(lm, prompts: Sequence[list[int]], targets: Sequence[list[int]], soft: torch.Tensor,
                         max_pass_tokens: int | None = None) -> float:
    """``target_loss(...).backward()`` done in several forward/backward passes that each fit the
    memory budget: gradients accumulate into ``soft.grad`` and equal those of the whole batch at
    once (each pass is weighted by its share of the batch's target tokens). Returns the loss."""
    loss = 0.0
    for part in _weighted_passes(lm, prompts, targets, soft, max_pass_tokens):
        part.backward()
        loss += float(part.detach())
    return loss


@torch.no_grad()
def target_loss_value(lm, prompts: Sequence[list[int]], targets: Sequence[list[int]], soft: torch.Tensor | None,
                      max_pass_tokens: int | None = None) -> float:
    """The mean target cross-entropy of ``target_loss`` without gradients, in passes that fit memory
    (the held-out loss of a tuning curve point)."""
    return sum(float(part) for part in _weighted_passes(lm, prompts, targets, soft, max_pass_tokens))


def _weighted_passes(lm, prompts, targets, soft, max_pass_tokens):
    """``target_loss`` of each pass of a batch, weighted by its share of the batch's target tokens
    (the parts sum to the loss of the whole batch)."""
    budget = max_pass_tokens or tuning_pass_tokens(lm)
    total = sum(len(t) for t in targets)
    for rows in tuning_passes([len(p) + len(t) for p, t in zip(prompts, targets)], budget):
        part = target_loss(lm, [prompts[r] for r in rows], [targets[r] for r in rows], soft)
        yield part * (sum(len(targets[r]) for r in rows) / total)


def length_grouped(plan: Sequence[Sequence[int]], lengths: Callable[[int], int], window: int,
                   seed: int = 0) -> list[list[int]]:
    """Regroup a seeded batch plan by length, ``window`` consecutive steps at a time.

    The items of each window (the same items, drawn by the same seeded shuffle) are sorted by
    length and cut into batches of the original sizes, so each batch pads less; the batches of a
    window are then put in a seeded order. Deterministic for a given plan, lengths and seed."""
    import random

    if window <= 1:
        return [list(b) for b in plan]
    out: list[list[int]] = []
    for start in range(0, len(plan), window):
        chunk = [list(b) for b in plan[start:start + window]]
        items = sorted((i for b in chunk for i in b), key=lambda i: (-lengths(i), i))
        regrouped, at = [], 0
        for b in chunk:
            regrouped.append(items[at:at + len(b)])
            at += len(b)
        random.Random(seed * 1_000_003 + start).shuffle(regrouped)
        out.extend(regrouped)
    return out
