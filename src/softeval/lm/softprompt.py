"""The soft prompt: n trainable vectors placed before every token of the prompt.

Placement (docs/design.md): ``[pad…][soft prompt][BOS][prompt]`` with attention mask 0 on the pads and
position ids counted from the mask, so a left-padded item gives the same logits as the same item
alone, and the layout without pads is exactly PEFT's (soft prompt first, before BOS). Saved as a PEFT
prompt-tuning adapter, so PEFT and lm-evaluation-harness (``peft=``) can load it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from safetensors.torch import save as tensor_bytes

from softeval.errors import UserError, shown
from softeval.protocol import ADAPTER_CONFIG, ADAPTER_WEIGHTS

SOFTEVAL_META = "softeval.json"
INIT_FROM = "from:"  # --init from:PATH: start from a saved soft prompt (warm start)


def init_source(init: str) -> Path | None:
    """The adapter folder of an ``--init from:PATH``, else None."""
    return Path(init[len(INIT_FROM):].strip()) if isinstance(init, str) and init.startswith(INIT_FROM) else None


def adapter_shape(folder: str | Path) -> tuple[int, ...]:
    """The shape of a saved soft prompt's ``prompt_embeddings``, read from the safetensors header (no
    tensor is loaded); a UserError when the folder holds no readable soft prompt."""
    weights = Path(folder) / ADAPTER_WEIGHTS
    if not weights.is_file():
        raise UserError(f"no soft prompt at {folder}: expected {ADAPTER_WEIGHTS} (and {ADAPTER_CONFIG}), "
                        "the soft_prompt/ folder a soft-prompt run writes")
    try:
        with safe_open(str(weights), framework="pt") as handle:
            if "prompt_embeddings" not in handle.keys():
                raise UserError(f"{weights} holds {sorted(handle.keys())}, not the tensor 'prompt_embeddings'")
            return tuple(handle.get_slice("prompt_embeddings").get_shape())
    except UserError:
        raise
    except Exception as err:
        raise UserError(f"cannot read soft prompt {weights}: {str(err).splitlines()[0] if str(err) else err}") \
            from None


def adapter_digest(folder: str | Path) -> str:
    """sha256 of a saved soft prompt's weights file: what a warm-started run's identity records instead
    of the folder's path, so moving the folder changes nothing and changing its tensor changes the run."""
    return hashlib.sha256((Path(folder) / ADAPTER_WEIGHTS).read_bytes()).hexdigest()


def init_identity(init: str) -> str:
    """``from:PATH`` as the run identity sees it: ``from:sha256:<hex>`` of the adapter's weights (the
    path as given while there is no adapter there yet); any other init unchanged."""
    source = init_source(init)
    if source is None or not (source / ADAPTER_WEIGHTS).is_file():
        return init
    return f"{INIT_FROM}sha256:{adapter_digest(source)}"


def init_record(init: str) -> dict | None:
    """What results.json ``tuning.init_from`` says of a warm start: the folder, its digest and what the
    source adapter's softeval.json says it was tuned on (model, task, seed, series, step)."""
    source = init_source(init)
    if source is None:
        return None
    record = {"path": str(source.resolve()), "sha256": adapter_digest(source)}
    found = read_meta(source)
    record.update({k: found[k] for k in ("model", "task", "seed", "series", "step") if k in found})
    return record


def read_meta(folder: Path) -> dict:
    """A saved soft prompt's softeval.json ({} when absent or damaged): softeval's own notes beside
    PEFT's adapter (init, what it was tuned on); the weights, not these notes, are what is scored."""
    try:
        found = json.loads((Path(folder) / SOFTEVAL_META).read_bytes())
    except (OSError, ValueError):  # missing, not JSON, not UTF-8
        return {}
    return found if isinstance(found, dict) else {}


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
        repeated or cut to ``num_tokens``; ``from:PATH``: a saved soft prompt (warm start), which must
        have ``num_tokens`` vectors of the model's hidden size (checked: a one-line UserError)."""
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
        elif init_source(how) is not None:
            loaded = cls.load(init_source(how), lm)
            if loaded.num_tokens != num_tokens:
                raise UserError(f"--init {how}: that soft prompt has {loaded.num_tokens} virtual tokens, the run "
                                f"asks for --tokens {num_tokens}: pass --tokens {loaded.num_tokens}")
            vectors = loaded.weight.detach()
        else:
            raise UserError(f"unknown soft-prompt init {shown(how)}: use vocab, random, text:\"...\" or from:PATH")
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
        # not save_file: a full disk is then an OSError (ENOSPC), as for every other file
        tmp.write_bytes(tensor_bytes({"prompt_embeddings": self.weight.detach().float().cpu().contiguous()}))
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
        init = read_meta(folder).get("init")
        return cls(prompt, init=init if isinstance(init, str) else "vocab")


def _embed_ids(embed: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return embed(torch.tensor(ids, device=embed.weight.device)).float().cpu()


def layout_inputs(lm, seqs, soft: torch.Tensor | None = None,
                  past_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The one input layout: ``[pads][soft prompt][tokens]`` per row, attention mask 0 on the pads,
    position ids counted from the mask (so a padded row reads exactly as it would alone).

    ``past_mask`` [B, P]: the rows continue P cached columns (a shared prefix with the soft prompt
    in it, an item's context); the new columns are ``[pads][tokens]`` (the soft prompt is already
    in the cache), the returned mask covers cached and new columns, and positions continue from
    the cached ones."""
    embed = lm.model.get_input_embeddings()
    device = embed.weight.device
    n_soft = 0 if soft is None or past_mask is not None else soft.shape[0]
    longest = max(len(s) for s in seqs)
    pads = [longest - len(s) for s in seqs]
    ids = torch.full((len(seqs), longest), lm.pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), n_soft + longest), dtype=torch.long)
    for row, seq in enumerate(seqs):
        if len(seq):
            ids[row, pads[row]:] = torch.tensor(list(seq), dtype=torch.long)
        mask[row, pads[row]:] = 1
    ids, mask = ids.to(device), mask.to(device)
    embeds = embed(ids)
    if n_soft:  # the soft prompt goes right before the first real token, after the pads
        soft = soft.to(embeds)
        embeds = torch.stack([torch.cat([embeds[row, :p], soft, embeds[row, p:]], dim=0)
                              for row, p in enumerate(pads)])
    if past_mask is not None:
        mask = torch.cat([past_mask.to(device=device, dtype=mask.dtype), mask], dim=1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    if past_mask is not None:
        positions = positions[:, past_mask.shape[1]:]
    return {"inputs_embeds": embeds, "attention_mask": mask, "position_ids": positions}
