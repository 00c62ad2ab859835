"""Forward passes and their KV caches: the head on the last positions only, the cache a plain
full-attention model grows in place, and the shared prefix computed once per call.

- shared prefix: the token prefix every sequence of a call shares (a chat template's fixed head,
  the instruction, the few-shot block), with the soft prompt in front of it, is run through the
  model once; its KV cache is expanded to every batch. The per-item suffixes follow it with their
  pads *between* prefix and suffix (attention mask 0, position ids counted from the mask), so every
  real token sees exactly the context and positions it has in the plain left-padded layout
  ``[pads][soft][prefix][suffix]`` (``softprompt.layout_inputs``).
- a plain (full-attention) KV cache grows in place (``GrowingLayer``: a buffer with spare room,
  doubled when full) instead of concatenating the whole cache at every decoding step.
- sliding-window models (Gemma 2/3, Mistral): the pads between prefix and suffix would count against
  the window, which transformers measures in columns. So a shared prefix there keeps every layer's
  whole cache (``GrowingLayer``s) and each forward pass gets its attention masks from token positions
  (``position_masks``: causal, and within the window on the sliding layers), exactly the masks of
  the plain layout, whatever the width; where a per-model probe shows the model does not take them
  (``position_masks_usable``), the prefix is not shared.

Each is checked against the plain path in tests/lm/test_engine_speed_paths.py.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Sequence

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from softeval.lm.batching import common_prefix_len
from softeval.lm.models import LoadedModel
from softeval.lm.softprompt import layout_inputs

MIN_PREFIX = 8  # shared prefix (soft prompt + tokens) shorter than this is not worth a cache


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


def forward_last(lm: LoadedModel, inputs: dict, keep: int, *, cache=None, use_cache: bool = False):
    """Forward pass that computes the vocabulary head only on the last ``keep`` positions,
    continuing ``cache`` (or ``inputs["cache"]``) if given; ``output_cache(out)`` is the cache after it.
    A sliding-window model continuing a ``growing_cache`` gets its masks from token positions
    (``position_masks``)."""
    inputs = dict(inputs)
    cache = inputs.pop("cache", cache)
    if _is_growing(cache) and not full_attention(lm.model) and inputs["attention_mask"].dim() == 2:
        inputs["attention_mask"] = position_masks(lm.model, inputs["attention_mask"], inputs["position_ids"])
    kwargs = {"use_cache": use_cache or cache is not None}
    if cache is not None:
        kwargs[_cache_kwarg(lm.model)] = cache
    if "logits_to_keep" in _forward_params(type(lm.model)):
        kwargs["logits_to_keep"] = keep
    out = lm.model(**inputs, **kwargs)
    return out.logits[:, -keep:], out


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


def _is_growing(cache) -> bool:
    return isinstance(cache, Cache) and getattr(cache, "layer_class_to_replicate", None) is GrowingLayer


MASKED_TYPES = ("full_attention", "sliding_attention")  # layer types position_masks can mask


def position_masks(model, mask: torch.Tensor, positions: torch.Tensor):
    """The additive 4D attention masks [B, 1, Q, K] of a pass whose keys are every column of ``mask``
    [B, K] (cached and new; 0 on pads) and whose queries are its last Q columns at ``positions``
    [B, Q]: a query sees the real keys at positions up to its own, and on a sliding layer only those
    less than the window behind it (transformers' rule: distance < sliding_window). Measured in
    positions, so the pads between a shared prefix and an item's suffix do not count. A pad query
    sees every column (its output is never read; a fully masked row would give NaN). One mask for a
    model whose every layer slides, else ``{layer type: mask}``."""
    cfg = getattr(model.config, "text_config", model.config)
    window = int(cfg.sliding_window)
    real = mask.bool()
    key_pos = (mask.cumsum(-1) - 1)[:, None, :]
    q_pos = positions[:, :, None]
    seen = real[:, None, :] & (key_pos <= q_pos)
    pad_query = ~real[:, -positions.shape[1]:, None]
    dtype = model.dtype

    def additive(allowed):
        allowed = allowed | pad_query
        return torch.zeros(allowed.shape, dtype=dtype, device=mask.device).masked_fill_(
            ~allowed, torch.finfo(dtype).min)[:, None]

    sliding = additive(seen & (q_pos - key_pos < window))
    types = set(getattr(cfg, "layer_types", None) or ("sliding_attention",))
    if types == {"sliding_attention"}:
        return sliding
    return {"full_attention": additive(seen), "sliding_attention": sliding}


_POSITION_MASKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def position_masks_usable(lm: LoadedModel) -> bool:
    """Does this sliding-window model take ``position_masks`` and give, on a short probe with pads
    between a shared prefix and the suffixes, the logits of the plain layout? Checked once per model."""
    if lm.model not in _POSITION_MASKS:
        _POSITION_MASKS[lm.model] = _position_probe(lm)
    return _POSITION_MASKS[lm.model]


def _position_probe(lm: LoadedModel) -> bool:
    cfg = getattr(lm.model.config, "text_config", lm.model.config)
    if not getattr(cfg, "sliding_window", None) \
            or not set(getattr(cfg, "layer_types", None) or ()) <= set(MASKED_TYPES):
        return False
    vocab = lm.model.get_input_embeddings().weight.shape[0]
    head = [t % vocab for t in range(3, 9)]
    seqs = [head + [t % vocab for t in range(20, 27)], head + [t % vocab for t in range(40, 42)]]
    try:
        with torch.no_grad():
            plain, _ = forward_last(lm, layout_inputs(lm, seqs, None), 1)
            prefix = SharedPrefix(lm, head, None, probed=True)
            shared, _ = forward_last(lm, suffix_inputs(lm, prefix, [s[len(head):] for s in seqs]), 1)
    except Exception:  # whatever a model raises on custom masks, the plain layout is kept
        return False
    a, b = shared.float(), plain.float()
    return bool(torch.isfinite(a).all()) and torch.allclose(a, b, rtol=1e-3, atol=1e-3 * max(1.0, float(b.abs().max())))


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

    def __init__(self, lm: LoadedModel, ids: Sequence[int], soft: torch.Tensor | None, *,
                 probed: bool = False):
        self.ids = list(ids)
        self.n_soft = 0 if soft is None else soft.shape[0]
        self.length = self.n_soft + len(self.ids)
        self.full = full_attention(lm.model)
        if not self.full and not (probed or position_masks_usable(lm)):
            self.usable, self.kv = False, []
            return
        # a sliding-window model's own cache keeps only its window: give it one that keeps every column
        own = None if self.full else growing_cache(())
        _, out = forward_last(lm, layout_inputs(lm, [self.ids], soft), 1, use_cache=True, cache=own)
        cache = output_cache(out)
        self.usable = own is not None or _cache_is_plain(lm.model, cache)
        if hasattr(cache, "layers"):
            self.kv = [(layer.keys, layer.values) for layer in cache.layers]
        elif hasattr(cache, "key_cache"):
            self.kv = list(zip(cache.key_cache, cache.value_cache))
        else:  # legacy tuple
            self.kv = [tuple(layer[:2]) for layer in cache]

    def expanded(self, batch: int):
        """The prefix's cache for ``batch`` rows (a ``growing_cache`` always on a sliding-window model,
        whose masks ``forward_last`` then builds from positions)."""
        legacy = tuple((k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)) for k, v in self.kv)
        return growing_cache(legacy) if GROWING_CACHE or not self.full else DynamicCache(legacy)


def plan_prefix(lm: LoadedModel, seqs: Sequence[Sequence[int]], soft: torch.Tensor | None, use: bool | None,
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


def suffix_inputs(lm: LoadedModel, prefix: SharedPrefix, suffixes: Sequence[Sequence[int]]) -> dict:
    """Inputs for the per-item parts after a cached prefix: ``[prefix][pads][suffix]``.

    The attention mask covers prefix and suffix columns (pads 0); position ids count attended
    tokens, so each suffix continues at ``prefix.length`` exactly as it would without pads."""
    past = torch.ones((len(suffixes), prefix.length), dtype=torch.long)
    return {**layout_inputs(lm, suffixes, past_mask=past), "cache": prefix.expanded(len(suffixes))}


def batch_inputs(lm: LoadedModel, seqs: Sequence[list[int]], soft, prefix: SharedPrefix | None) -> dict:
    if prefix is None:
        return layout_inputs(lm, list(seqs), soft)
    n = len(prefix.ids)
    return suffix_inputs(lm, prefix, [s[n:] for s in seqs])
