"""Memory: how many rows fit (``batch_size=0`` or ``"auto"`` picks a batch size that fits the free
memory of the model's device, CPU or CUDA, never above ``max_batch_size``), how many padded tokens a
tuning forward pass may hold, and handing freed memory back to the system between phases.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os

import torch

from softeval.lm.models import LoadedModel

try:
    import psutil
except ImportError:  # pragma: no cover - psutil is a dependency of accelerate
    psutil = None

DEFAULT_MAX_BATCH = 64  # the bound of an automatic batch size when the caller sets none


def _free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    if psutil is None:  # pragma: no cover
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    return int(psutil.virtual_memory().available)


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


def bytes_per_row(lm: LoadedModel, seq_len: int, *, keep: int = 1, new_tokens: int = 0,
                  training: bool = False) -> int:
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


def auto_batch_size(lm: LoadedModel, seq_len: int, *, max_batch_size: int = DEFAULT_MAX_BATCH, keep: int = 1,
                    new_tokens: int = 0, training: bool = False, fraction: float = 0.5) -> int:
    """Largest batch (1..max_batch_size) whose estimated memory fits ``fraction`` of the free memory
    of the model's device (CUDA: ``mem_get_info``; CPU: available RAM)."""
    per_row = max(1, bytes_per_row(lm, seq_len, keep=keep, new_tokens=new_tokens, training=training))
    fits = int(_free_bytes(lm.device) * fraction) // per_row
    return max(1, min(int(max_batch_size), fits))


def resolve_batch_size(lm: LoadedModel, batch_size, seq_len: int, max_batch_size: int | None, **kw) -> int:
    bound = int(max_batch_size or DEFAULT_MAX_BATCH)
    if batch_size in (0, None, "auto"):
        return auto_batch_size(lm, seq_len, max_batch_size=bound, **kw)
    return max(1, min(int(batch_size), bound) if max_batch_size else int(batch_size))


# Memory one tuning forward pass may hold on CPU (activations kept for backward); on CUDA a
# fraction of the free device memory.
CPU_TUNING_PASS_BYTES = 1 << 30


def tuning_pass_tokens(lm: LoadedModel, fraction: float = 0.4) -> int:
    """Padded tokens per tuning forward pass that fit the memory budget (estimate of
    ``bytes_per_row`` with every layer's activations kept)."""
    per_token = max(1, bytes_per_row(lm, 512, keep=0, training=True) // 512)  # head: target positions only
    budget = _free_bytes(lm.device) * fraction if lm.device.type == "cuda" else CPU_TUNING_PASS_BYTES
    return max(1, int(budget // per_token))
