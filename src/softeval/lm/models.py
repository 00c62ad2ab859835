"""Load a causal LM and its tokenizer: by preset name, hub id, local folder or GGUF file.

Only the input-embedding layer and the ``inputs_embeds`` / ``position_ids`` / ``attention_mask``
arguments of the model's forward are used elsewhere, so any Hugging Face causal LM works without
per-architecture code.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError

from softeval.checks import is_whole
from softeval.constants import BASE, KINDS, POST_TRAINED
from softeval.errors import UserError, shown
from softeval.lm.loadbars import bars_only_on_a_terminal
from softeval.lm.presets import MODEL_CONFIG, PRESETS, Preset, converted_path, damage, damaged_cache, prepare

if TYPE_CHECKING:  # engine.py reads LoadedModel: only the type goes this way
    from softeval.lm.engine import Engine

_POST_TRAINED_NAME = re.compile(r"(instruct|chat|[-_]it\b|[-_]it[-_]|sft|dpo|rlhf|orpo|kto)", re.IGNORECASE)


@dataclass
class LoadedModel:
    """A frozen model with what the rest of softeval needs to know about it."""

    model: torch.nn.Module
    tokenizer: object
    name: str
    kind: str
    kind_source: str
    pad_id: int
    eos_ids: tuple[int, ...]
    source: str = ""  # what the weights were read from: a preset's dequantised folder, a folder or a hub id
    # the engine kept for this model between jobs (a backend that keeps one: vLLM) and the (backend, engine
    # arguments) it was started with: lm.backends.start_engine
    engine: Engine | None = None
    engine_started: tuple[str, dict] | None = None

    @property
    def device(self) -> torch.device:
        return self.model.get_input_embeddings().weight.device

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    @property
    def max_length(self) -> int:
        cfg = self.model.config
        cfg = getattr(cfg, "text_config", cfg)
        return int(getattr(cfg, "max_position_embeddings", 0) or 2048)

    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def guess_kind(name: str) -> str:
    return POST_TRAINED if _POST_TRAINED_NAME.search(Path(name).name if os.path.exists(name) else name) else BASE


def pick_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def steady_attention_kernels(device: str) -> None:
    """On CUDA, leave cuDNN out of PyTorch's attention (SDPA) backends, for the whole process.

    In bf16 on an H200 (torch 2.11), SDPA picks cuDNN's fused attention, which builds a kernel plan for every
    new shape: 1.5-3.6 s the first time a tuning batch's length is seen, 0.12 s once seen, and tuning and
    scoring batches have ragged lengths, so most steps are new. Without cuDNN (flash and memory-efficient
    attention stay) the first step of a shape costs what the next does, and a seen shape no more than
    with cuDNN (BENCHMARKS.md, "Attention kernels on CUDA"). Elsewhere nothing is changed."""
    if str(device).startswith("cuda"):
        torch.backends.cuda.enable_cudnn_sdp(False)


def pick_dtype(dtype: str, device: str) -> torch.dtype:
    if dtype == "auto":
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    try:
        return {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
                "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}[dtype]
    except KeyError:
        raise UserError(f"unknown dtype {shown(dtype)}: use auto, float32, bfloat16 or float16") from None


def _from_pretrained(source: str, gguf_file: str | None, dtype: torch.dtype, device_map):
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: slow to import; only a load needs it

    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    with bars_only_on_a_terminal():
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs, **_not_mistral_kwargs(source))
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, device_map=device_map, **kwargs)
    return model, tokenizer


MISTRAL_TYPES = {"mistral", "mistral3", "voxtral", "ministral", "pixtral"}


def _not_mistral_kwargs(source: str) -> dict:
    """``fix_mistral_regex=False`` for a local non-Mistral checkpoint where transformers has the flag.

    transformers 4.57.3 and later 4.x warn that any local checkpoint with a vocabulary over 100k
    saved by those versions has "an incorrect regex pattern" (a check meant for Mistral
    tokenizers): a false alarm for every other model, our dequantised Gemma preset included.
    Mistral checkpoints keep the check.
    """
    from transformers import PreTrainedTokenizerBase  # lazy (see _from_pretrained)

    if not hasattr(PreTrainedTokenizerBase, "_patch_mistral_regex"):
        return {}
    try:
        model_type = json.loads((Path(source) / MODEL_CONFIG).read_text()).get("model_type")
    except (OSError, ValueError):
        return {}
    return {"fix_mistral_regex": False} if model_type and model_type not in MISTRAL_TYPES else {}


def _load_preset(preset: Preset, dtype: torch.dtype, device_map):
    """Load a preset from its cached folder, preparing it first where it is not there yet (lm/presets.py:
    the GGUF dequantised once, kept as fp32 safetensors; ``softeval prepare`` does it ahead of a run). A folder
    whose files are not of the sizes its manifest says is refused before it is read (``presets.prepare``), one
    that does not load is checked byte by byte to say why (``presets.damage``); either error names the folder and
    ``softeval prepare``."""
    saved = converted_path(preset)
    if preset.spm_bpe_tokenizer and saved.name.endswith("-tf4"):
        print(f"warning: transformers 4 rebuilds {preset.name}'s GGUF tokenizer without its user-defined pieces: runs "
              "of spaces are split unlike the original tokenizer (GSM8K: 76 of 300 prompts). Upgrade to transformers 5 "
              "for the original tokenization.", file=sys.stderr)
    prepare(preset)
    try:
        return _from_pretrained(str(saved), None, dtype, device_map)
    except (OSError, ValueError, SafetensorError) as err:  # what the manifest's sizes did not catch
        raise damaged_cache(preset, damage(saved, full=True) or f"it does not load: {_first_line(err)}") from None


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def check_model_name(name: str) -> None:
    """A preset, a .gguf file, a local folder or a hub id ``org/name``; anything else is refused before
    any loading (the same dispatch as ``load_model``)."""
    if name in PRESETS or (name.endswith(".gguf") and Path(name).is_file()):
        return
    if name.endswith(".gguf"):
        raise UserError(f"GGUF file not found: {name}")
    if os.path.isdir(name):
        if not os.path.isfile(os.path.join(name, MODEL_CONFIG)):
            raise UserError(f"model folder {name} has no {MODEL_CONFIG}: give the folder of a Hugging Face "
                            "model (config.json, weights, tokenizer), a preset, a .gguf file or a hub id")
        return
    if name.startswith(("/", "./", "../", "~")):  # a path, never a hub id
        raise UserError(f"no model folder at {name}: give the folder of a Hugging Face model, a preset "
                        f"({', '.join(PRESETS)}), a .gguf file or a hub id like 'org/name'")
    if re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        return
    raise UserError(
        f"unknown model {shown(name)}: give a preset ({', '.join(PRESETS)}), a local folder, "
        "a .gguf file or a hub id like 'org/name'. `softeval models` lists the presets."
    )


def hidden_size_before_loading(name: str) -> int | None:
    """The hidden size of model ``name`` without loading it: a preset's recorded one, a local folder's
    config.json (its text part for multimodal configs); None for a hub id or a .gguf file (known once
    loaded) and for a config that does not say."""
    if name in PRESETS:
        return PRESETS[name].hidden or None
    if not os.path.isdir(name):
        return None
    try:
        cfg = json.loads(Path(name, MODEL_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(cfg, dict) and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]
    value = cfg.get("hidden_size") if isinstance(cfg, dict) else None
    return value if is_whole(value) and value > 0 else None


ANSWER_MARK = "softeval-answer-mark"


def end_of_turn_id(tokenizer) -> int | None:
    """The special token the chat template writes right after an assistant message (ChatML's
    ``<|im_end|>``, Llama 3's ``<|eot_id|>``, Gemma's ``<end_of_turn>``), or None: no template,
    a template that cannot render a two-message chat, or plain text after the message."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": ANSWER_MARK}]
    try:
        text = tokenizer.apply_chat_template(chat, tokenize=False)
    except Exception:  # templates raise on what they do not support (jinja errors, ValueError, ...)
        return None
    at = text.rfind(ANSWER_MARK)
    rest = text[at + len(ANSWER_MARK):] if at >= 0 else ""
    ids = list(tokenizer(rest, add_special_tokens=False).input_ids) if rest.strip() else []
    if not ids:
        return None
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    special = ids[0] in set(getattr(tokenizer, "all_special_ids", []) or []) \
        or getattr(added.get(ids[0]), "special", False)
    return int(ids[0]) if special else None


def load_model(name: str, *, device: str = "auto", dtype: str = "auto", kind: str | None = None) -> LoadedModel:
    """Load ``name`` (preset, local folder, .gguf file or hub id), frozen and in eval mode."""
    device = pick_device(device)
    torch_dtype = pick_dtype(dtype, device)
    steady_attention_kernels(device)
    device_map = "auto" if device == "cuda" and torch.cuda.device_count() > 1 else None
    started = time.time()
    preset = PRESETS.get(name)
    model, tokenizer = _load_weights(name, preset, torch_dtype, device_map)
    if device_map is None:
        model.to(device)
    model.eval()
    model.requires_grad_(False)
    for attr, value in (preset.tokenizer_fixes if preset else {}).items():
        setattr(tokenizer, attr, value)
    model_kind, kind_source = _model_kind(name, preset, kind)
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    source = str(converted_path(preset)) if preset is not None else name
    loaded = LoadedModel(model, tokenizer, name, model_kind, kind_source, int(pad), _eos_ids(model, tokenizer, preset),
                         source)
    loaded.load_seconds = time.time() - started  # type: ignore[attr-defined]
    return loaded


def _load_weights(name: str, preset: Preset | None, torch_dtype: torch.dtype, device_map: str | None) -> tuple:
    """The model and tokenizer of ``name`` (``preset``: its preset, if it is one), as transformers loads them;
    what cannot be read is the user's error, naming the model."""
    try:
        if preset is not None:
            return _load_preset(preset, torch_dtype, device_map)
        if name.endswith(".gguf"):
            path = Path(name)
            if not path.is_file():
                raise UserError(f"GGUF file not found: {name}")
            return _from_pretrained(str(path.parent), path.name, torch_dtype, device_map)
        check_model_name(name)
        return _from_pretrained(name, None, torch_dtype, device_map)
    except (OSError, ValueError) as err:  # missing files, no hub access, gated repo; a config or tokenizer
        raise UserError(f"could not load model {shown(name)}: {err}") from None  # transformers cannot read
    except SafetensorError as err:  # a weights file cut short (an interrupted copy or download) or damaged
        raise UserError(f"could not load model {shown(name)}: a weights file is damaged or incomplete ({err}); "
                        "copy or download the model again") from None


def _model_kind(name: str, preset: Preset | None, kind: str | None) -> tuple[str, str]:
    """The model's kind and where it came from: ``kind`` (the flag), else the preset's, else guessed from the
    name."""
    if kind:
        model_kind, kind_source = kind, "flag"
    elif preset is not None:
        model_kind, kind_source = preset.kind, "preset"
    else:
        model_kind, kind_source = guess_kind(name), "guessed from name"
    if model_kind not in KINDS:
        raise UserError(f"unknown model kind {shown(model_kind)}: use {' or '.join(KINDS)}")
    return model_kind, kind_source


def _eos_ids(model, tokenizer, preset: Preset | None) -> tuple[int, ...]:
    """The tokens that end a generation: the tokenizer's EOS and the generation config's (a preset's fixed EOS
    instead, where it fixes one), and the chat template's end of turn."""
    eos = set()
    if tokenizer.eos_token_id is not None:
        eos.add(int(tokenizer.eos_token_id))
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if gen_eos is not None:
        eos.update(int(e) for e in (gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]))
    if preset is not None and preset.tokenizer_fixes.get("eos_token"):
        eos = {int(tokenizer.convert_tokens_to_ids(preset.tokenizer_fixes["eos_token"]))}
    end_of_turn = end_of_turn_id(tokenizer)
    if end_of_turn is not None:  # generation stops there even where the generation config omits it
        eos.add(end_of_turn)
    return tuple(sorted(eos))
