"""The soft prompt: n trainable vectors placed before every token of the prompt.

Placement (DESIGN.md): ``[pad…][soft prompt][BOS][prompt]`` with attention mask 0 on the pads and
position ids counted from the mask, so a left-padded item gives the same logits as the same item
alone, and the layout without pads is exactly PEFT's (soft prompt first, before BOS). Saved as a PEFT
prompt-tuning adapter, so PEFT and lm-evaluation-harness (``peft=``) can load it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from softeval.errors import UserError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
SOFTEVAL_META = "softeval.json"


class SoftPrompt(torch.nn.Module):
    """``weight``: [num_virtual_tokens, hidden_size], kept in float32 and cast when injected."""

    def __init__(self, embeddings: torch.Tensor, init: str = "vocab"):
        super().__init__()
        self.weight = torch.nn.Parameter(embeddings.detach().float().clone())
        self.init = init

    @property
    def num_tokens(self) -> int:
        return self.weight.shape[0]

    @classmethod
    def initialise(cls, lm, num_tokens: int = 10, how: str = "vocab", seed: int = 0) -> SoftPrompt:
        """``vocab``: embeddings of randomly sampled (non-special) vocabulary tokens; ``random``:
        Gaussian with the embedding table's scale; ``text:...``: embeddings of that text's tokens,
        repeated or cut to ``num_tokens``."""
        embed = lm.model.get_input_embeddings()
        generator = torch.Generator().manual_seed(seed)
        if how == "vocab":
            special = set(getattr(lm.tokenizer, "all_special_ids", []) or [])
            vocab = min(embed.num_embeddings, len(lm.tokenizer))
            ids = []
            while len(ids) < num_tokens:
                cand = int(torch.randint(0, vocab, (1,), generator=generator))
                if cand not in special:
                    ids.append(cand)
            vectors = _embed_ids(embed, ids)
        elif how == "random":
            table = _embed_ids(embed, list(range(min(embed.num_embeddings, 4096))))
            vectors = torch.randn(num_tokens, table.shape[1], generator=generator) * table.std()
        elif how.startswith("text:"):
            text = how[len("text:"):].strip().strip('"')
            ids = lm.tokenizer(text, add_special_tokens=False).input_ids
            if not ids:
                raise UserError("--init text:... needs a non-empty text")
            ids = (ids * num_tokens)[:num_tokens]
            vectors = _embed_ids(embed, ids)
        else:
            raise UserError(f"unknown soft-prompt init {how!r}: use vocab, random or text:\"...\"")
        return cls(vectors, init=how)

    def save(self, folder: Path, lm, extra: dict | None = None) -> None:
        """Write a PEFT prompt-tuning adapter (config + ``prompt_embeddings`` tensor)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        cfg = getattr(lm.model.config, "text_config", lm.model.config)
        config = {
            "peft_type": "PROMPT_TUNING",
            "task_type": "CAUSAL_LM",
            "num_virtual_tokens": self.num_tokens,
            "token_dim": self.weight.shape[1],
            "num_transformer_submodules": 1,
            "num_attention_heads": getattr(cfg, "num_attention_heads", None),
            "num_layers": getattr(cfg, "num_hidden_layers", None),
            "prompt_tuning_init": "TEXT" if self.init.startswith("text:") else "RANDOM",
            "prompt_tuning_init_text": self.init[5:] if self.init.startswith("text:") else None,
            "tokenizer_name_or_path": None,
            "base_model_name_or_path": lm.name,
            "inference_mode": True,
            "revision": None,
        }
        tmp = folder / (ADAPTER_WEIGHTS + ".tmp")
        save_file({"prompt_embeddings": self.weight.detach().float().cpu().contiguous()}, str(tmp))
        tmp.replace(folder / ADAPTER_WEIGHTS)
        (folder / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2))
        # Our own metadata lives beside PEFT's config, which warns about keys it does not know.
        meta = {"placement": "before-bos", "init": self.init, "model": lm.name, **(extra or {})}
        (folder / SOFTEVAL_META).write_text(json.dumps(meta, indent=2))

    @classmethod
    def load(cls, folder: str | Path, lm) -> SoftPrompt:
        """Read a PEFT prompt-tuning adapter and check that it fits ``lm``."""
        folder = Path(folder)
        weights = folder / ADAPTER_WEIGHTS
        if not weights.is_file():
            raise UserError(f"no soft prompt at {folder}: expected {ADAPTER_WEIGHTS} (and {ADAPTER_CONFIG})")
        try:
            tensors = load_file(str(weights))
        except Exception as err:
            raise UserError(f"cannot read soft prompt {weights}: {err}") from None
        if "prompt_embeddings" not in tensors:
            raise UserError(f"{weights} holds {sorted(tensors)}, not the tensor 'prompt_embeddings'")
        prompt = tensors["prompt_embeddings"]
        hidden = lm.model.get_input_embeddings().embedding_dim
        if prompt.ndim != 2 or prompt.shape[1] != hidden or prompt.shape[0] < 1:
            raise UserError(
                f"soft prompt {weights} has shape {tuple(prompt.shape)}, but model {lm.name} needs "
                f"[num_virtual_tokens, {hidden}]: it was tuned for another model"
            )
        if not torch.isfinite(prompt).all():
            raise UserError(f"soft prompt {weights} contains NaN or infinite values")
        init = "vocab"
        if (folder / SOFTEVAL_META).is_file():
            init = json.loads((folder / SOFTEVAL_META).read_text()).get("init", init)
        return cls(prompt, init=init)


def _embed_ids(embed: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return embed(torch.tensor(ids, device=embed.weight.device)).float().cpu()


def build_inputs(lm, seqs: list[list[int]], soft: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """Left-padded model inputs for token sequences, with the soft prompt (if any) before each one.

    Returns ``inputs_embeds`` [B, T, H], ``attention_mask`` [B, T] and ``position_ids`` [B, T]
    (positions count only attended tokens, so pads shift nothing).
    """
    embed = lm.model.get_input_embeddings()
    device = embed.weight.device
    n_soft = 0 if soft is None else soft.shape[0]
    width = max(len(s) for s in seqs) + n_soft
    ids = torch.full((len(seqs), width - n_soft), lm.pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        if seq:
            ids[row, width - n_soft - len(seq):] = torch.tensor(seq, dtype=torch.long)
        mask[row, width - n_soft - len(seq):] = 1
    ids, mask = ids.to(device), mask.to(device)
    token_embeds = embed(ids)
    if soft is not None:
        # Soft prompt goes right before the first real token, after the pads.
        parts = []
        for row, seq in enumerate(seqs):
            pads = width - n_soft - len(seq)
            parts.append(torch.cat([token_embeds[row, :pads], soft.to(token_embeds),
                                    token_embeds[row, pads:]], dim=0))
        inputs = torch.stack(parts)
    else:
        inputs = token_embeds
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return {"inputs_embeds": inputs, "attention_mask": mask, "position_ids": positions}
