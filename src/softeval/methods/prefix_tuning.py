"""prefix-tuning: P-tuning v2's deep prompts (Liu et al. 2022; PEFT's ``PrefixTuningConfig``): ``--tokens`` trained
key and value vectors before every attention layer's own, the model frozen. Liu et al. found plain prompt tuning
weak below about 10B parameters, where deep prompts matched fine-tuning; this method measures that on the models a
run has. Asked for by name (``--method prefix-tuning``); a BASELINE, so the soft prompt is tested against it item by
item (`softeval compare`, the verdicts, the report).

One module: the spec, its maker and its part (methods/part.py). The prefix enters every attention call through an
attention function of transformers' ``AttentionInterface`` that puts the layer's trained keys and values before the
cached ones (the prompt's positions are not moved); caches, batching and the shared-prefix cache of lm/ see the
model as they always do. Saved in PEFT's prefix-tuning format (``prompt_embeddings`` [tokens, layers x 2 x kv heads
x head dim], PEFT's layout). Initialised from the frozen model's own keys and values of ``--tokens`` seeded
vocabulary tokens (Li and Liang 2021: an init from real activations tunes better than a random one).

A model whose layers are not all attention (state-space or hybrid models: Mamba, Jamba, ...) is refused before it
loads where its config says so, and any model whose attention does not run through transformers' interface (no layer
index, or a kernel other than sdpa or eager) once loaded, before its run folder starts. vLLM does not read a prefix
in the transformers model: lm/backends.py refuses the method on it. torch and transformers are imported in the
functions that use them, so the registry stays light.
"""

from __future__ import annotations

import json
import sys
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from softeval.constants import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from softeval.errors import UserError
from softeval.methods.part import LAYER_PREFIX
from softeval.methods.spec import BASELINE, POOL_OPTIONS, TUNING_OPTIONS, MethodSpec

FOLDER = "prefix"  # a finished run's folder of the saved prefix
FORMAT_VERSION = 1
SOFTEVAL_META = "softeval.json"
KERNEL = "softeval-prefix"  # the attention implementation's name, with the kernel it wraps after a '-'
KERNELS = ("sdpa", "eager")  # the kernels the prefix wraps
# model types whose layers are not all attention (a recurrent state instead of keys and values)
NOT_ATTENTION = ("mamba", "mamba2", "rwkv", "jamba", "zamba", "zamba2", "falcon_mamba", "falcon_h1", "bamba",
                 "recurrent_gemma", "lfm2", "qwen3_next", "granitemoehybrid", "nemotron_h", "xlstm", "minimax")
ATTENTION_LAYERS = ("full_attention", "sliding_attention", "chunked_attention")

SPEC = MethodSpec(
    name="prefix-tuning", label="prefix-tuning", colour="#c7792b", who="the prefix", role=BASELINE,
    part="softeval.methods.prefix_tuning:MAKER", reads=(*TUNING_OPTIONS, "lr", *POOL_OPTIONS), default=False,
    folder=FOLDER,
    advice="the prefix did not learn the format, so its scores are not format-free; try more --steps, another --lr "
           "or --tokens, and --answer-share 0.5 where the targets are worked solutions")


def not_attention(config: dict) -> str | None:
    """Why a model of ``config`` (its config.json) cannot take a prefix, or None."""
    config = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    kind = config.get("model_type")
    if kind in NOT_ATTENTION:
        return f"its layers ({kind}) keep a recurrent state, not attention keys and values"
    others = sorted({t for t in config.get("layer_types") or () if t not in ATTENTION_LAYERS})
    if others:
        return f"it has layers that are not attention ({', '.join(map(str, others))})"
    return None


def _config_before_loading(model: str) -> dict:
    """A local model folder's config.json (nothing for a preset, a hub id or a .gguf file: known once loaded)."""
    try:
        found = json.loads((Path(model) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


@dataclass(frozen=True)
class PrefixMaker:
    """Prefix tuning's ``PartMaker``: ``--tokens`` vectors per layer, tuned at ``--lr``."""

    what: str = "prefix"
    enters: str = LAYER_PREFIX
    warm_starts: bool = False

    def learning_rate(self, cfg: Any) -> float:
        return cfg.lr

    def check(self, cfg: Any, spelling: Any) -> None:
        why = not_attention(_config_before_loading(cfg.model))
        if why:
            raise UserError(f"method {SPEC.name} cannot run on {cfg.model}: {why}; use soft-prompt or lora")

    @contextmanager
    def attached(self, lm: Any, cfg: Any, method: str, instruction: str, spelling: Any) -> Iterator[PrefixPart]:
        part = PrefixPart.initialise(lm, cfg.tokens, cfg.seed)
        part.tuning(lm.model, False)
        try:
            yield part
        finally:
            part.detach(lm.model)


MAKER = PrefixMaker()
_ACTIVE: list[PrefixPart] = []  # the prefix in the model now (one at a time in a process)


class PrefixPart:
    """The trained keys and values: ``weight`` [tokens, layers x 2 x kv heads x head dim] in float32, PEFT's layout
    (row p: layer 0's key, layer 0's value, layer 1's key, ... of virtual token p)."""

    what, enters, soft, loaded_from = "prefix", LAYER_PREFIX, None, None

    def __init__(self, weight: Any, layers: int, heads: int, head_dim: int, model_name: str):
        import torch  # a run that tunes: the registry imports this module without torch

        self.weight = torch.nn.Parameter(weight.detach().float().clone())
        self.layers, self.heads, self.head_dim, self.model_name = layers, heads, head_dim, model_name
        self._kernels: dict[int, tuple[Any, str]] = {}  # id(config) -> (config, the kernel it had)
        # id(model) -> the models the prefix is in (tuning asks every step), held weakly: a tuning copy in another
        # dtype is freed when tuning ends
        self._in: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    @property
    def num_tokens(self) -> int:
        return self.weight.shape[0]

    @classmethod
    def initialise(cls, lm: Any, num_tokens: int, seed: int) -> PrefixPart:
        """The frozen model's own keys and values of ``num_tokens`` seeded non-special vocabulary tokens."""
        import torch  # see __init__

        attention = _attention_modules(lm.model)
        special = set(getattr(lm.tokenizer, "all_special_ids", []) or [])
        vocab = min(lm.model.get_input_embeddings().num_embeddings, len(lm.tokenizer))
        generator, ids = torch.Generator().manual_seed(seed), []
        while len(ids) < num_tokens:
            candidate = int(torch.randint(0, vocab, (1,), generator=generator))
            if candidate not in special:
                ids.append(candidate)
        with torch.no_grad():
            out = lm.model(input_ids=torch.tensor([ids], device=lm.device), use_cache=True)
        cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values  # transformers 5's names
        pairs = [_layer_cache(cache, i) for i in range(len(attention))]
        kv = torch.stack([t[0].float() for pair in pairs for t in pair])  # [layers x 2, heads, tokens, head dim]
        layers, heads, head_dim = len(pairs), kv.shape[1], kv.shape[3]
        return cls(kv.permute(2, 0, 1, 3).reshape(num_tokens, -1), layers, heads, head_dim, lm.name)

    def layer(self, index: int, dtype: Any) -> tuple[Any, Any]:
        """Layer ``index``'s keys and values, [1, kv heads, tokens, head dim] in ``dtype``."""
        kv = self.weight.view(self.num_tokens, self.layers * 2, self.heads, self.head_dim).permute(1, 2, 0, 3)
        return kv[2 * index].unsqueeze(0).to(dtype), kv[2 * index + 1].unsqueeze(0).to(dtype)

    def trainable(self) -> dict[str, Any]:
        return {"prefix": self.weight}  # the checkpoint's name of it (store/checkpoint.py)

    def tuning(self, model: Any, on: bool) -> None:
        """The prefix in ``model`` (the loaded one, or its copy in the tuning dtype), tuning or scoring alike."""
        _ACTIVE[:] = [self]
        if self._in.get(id(model)) is model:
            return
        for module in _attention_modules(model):
            config = module.config
            kernel = config._attn_implementation
            if kernel.startswith(KERNEL):
                continue
            if kernel not in KERNELS:
                raise UserError(f"method {SPEC.name} cannot run on {self.model_name}: its attention runs on "
                                f"{kernel}, and the prefix enters only {' or '.join(KERNELS)}; load it with one of "
                                "those, or use soft-prompt or lora")
            self._kernels.setdefault(id(config), (config, kernel))
            config._attn_implementation = _registered(kernel)
        self._in[id(model)] = model

    def detach(self, model: Any) -> None:
        """The model's own attention back, the prefix out."""
        for config, kernel in self._kernels.values():
            config._attn_implementation = kernel
        self._kernels.clear()
        self._in.clear()
        _ACTIVE.clear()

    def record(self, summary: dict) -> dict:
        summary.pop("init", None)  # the soft prompt's setting; the prefix starts from vocabulary activations
        summary["prefix"] = {"num_virtual_tokens": self.num_tokens, "layers": self.layers, "kv_heads": self.heads,
                             "head_dim": self.head_dim, "init": "vocab activations"}
        return summary

    def save(self, folder: Path, lm: Any, tuned_on: dict) -> None:
        """PEFT's prefix-tuning folder (config and ``prompt_embeddings``), softeval's notes beside it. PEFT reads
        GQA models' prefixes with the key-value heads, as written here; it counts the prompt's positions after the
        prefix, softeval from 0, so PEFT's scores of it differ slightly from the run's."""
        from safetensors.torch import save as tensor_bytes  # see __init__

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        config = {"peft_type": "PREFIX_TUNING", "task_type": "CAUSAL_LM", "num_virtual_tokens": self.num_tokens,
                  "token_dim": self.heads * self.head_dim, "num_transformer_submodules": 1,
                  "num_attention_heads": self.heads, "num_layers": self.layers,
                  "encoder_hidden_size": self.heads * self.head_dim, "prefix_projection": False,
                  "base_model_name_or_path": lm.name, "inference_mode": True, "revision": None}
        tmp = folder / (ADAPTER_WEIGHTS + ".tmp")
        tmp.write_bytes(tensor_bytes({"prompt_embeddings": self.weight.detach().float().cpu().contiguous()}))
        tmp.replace(folder / ADAPTER_WEIGHTS)
        (folder / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2))
        meta = {"format_version": FORMAT_VERSION, "method": SPEC.name, "model": lm.name,
                "trainable_parameters": self.weight.numel(), **tuned_on}
        (folder / SOFTEVAL_META).write_text(json.dumps(meta, indent=2))


def _attention_modules(model: Any) -> list:
    """The model's attention layers in order (each with its ``layer_idx`` and ``config``); a model without them is
    refused in one line."""
    found = [m for m in model.modules() if hasattr(m, "layer_idx") and hasattr(m, "config")
             and type(m).__name__.endswith("Attention")]
    if not found or sorted(m.layer_idx for m in found) != list(range(len(found))):
        raise UserError(f"method {SPEC.name} cannot run on a {type(model).__name__}: its attention layers do not "
                        "run through transformers' attention interface; use soft-prompt or lora")
    return sorted(found, key=lambda m: m.layer_idx)


def _layer_cache(cache: Any, index: int) -> tuple[Any, Any]:
    """Layer ``index``'s keys and values in a transformers cache."""
    layer = cache.layers[index]
    return layer.keys, layer.values


def _registered(kernel: str) -> str:
    """The name of the attention function that puts the prefix before ``kernel``'s keys and values (registered
    with transformers, with ``kernel``'s mask, the first time)."""
    from transformers import AttentionInterface  # see PrefixPart.__init__
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    name = f"{KERNEL}-{kernel}"
    if name not in ALL_MASK_ATTENTION_FUNCTIONS:
        AttentionInterface.register(name, _prefixed(kernel))
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[kernel])
    return name


def _prefixed(kernel: str):
    """``kernel``'s attention with the active prefix's keys and values first, every query allowed to see them."""
    import torch  # see PrefixPart.__init__
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    def attention(module, query, key, value, attention_mask, **kwargs):
        run = (getattr(sys.modules[type(module).__module__], "eager_attention_forward") if kernel == "eager"
               else ALL_ATTENTION_FUNCTIONS[kernel])
        if _ACTIVE:
            k, v = _ACTIVE[0].layer(module.layer_idx, key.dtype)
            n, rows = k.shape[2], key.shape[0]
            queries, keys = query.shape[2], key.shape[2]
            if attention_mask is None:  # causal, aligned to the last keys (the kernel would have inferred it)
                attention_mask = torch.ones(queries, keys, dtype=torch.bool, device=key.device).tril(keys - queries)
                attention_mask = attention_mask[None, None]
            attention_mask = attention_mask[..., -keys:]
            seen = (torch.ones if attention_mask.dtype == torch.bool else torch.zeros)(
                *attention_mask.shape[:-1], n, dtype=attention_mask.dtype, device=attention_mask.device)
            attention_mask = torch.cat([seen, attention_mask], dim=-1)
            key = torch.cat([k.to(key.device).expand(rows, -1, -1, -1), key], dim=2)
            value = torch.cat([v.to(value.device).expand(rows, -1, -1, -1), value], dim=2)
        return run(module, query, key, value, attention_mask, **kwargs)

    return attention
