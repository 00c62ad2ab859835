"""The soft prompt: n trainable vectors placed before every token of the prompt.

Placement (docs/reference/protocol.md): ``[pad…][soft prompt][BOS][prompt]`` with attention mask 0 on the pads and
position ids counted from the mask, so a left-padded item gives the same logits as the same item
alone, and the layout without pads is exactly PEFT's (soft prompt first, before BOS). Saved as a PEFT
prompt-tuning adapter, so PEFT and lm-evaluation-harness (``peft=``) can load it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from safetensors.torch import save as tensor_bytes

from softeval.constants import ADAPTER_CONFIG, ADAPTER_WEIGHTS, SOFT_PROMPT_FORMAT_VERSION
from softeval.errors import UserError, shown
from softeval.lm.models import LoadedModel
from softeval.methods.part import INPUT_PREFIX

SOFTEVAL_META = "softeval.json"

# The init grammar: how a soft prompt's first vectors are chosen. Read by ``parse_init`` only.
INIT_TEXT = "text:"  # text:WORDS: the embeddings of those words' tokens
INIT_FROM = "from:"  # from:PATH: a saved soft prompt (warm start)
INIT_INSTRUCTION = "instruction"  # the embeddings of the task's own instruction (vocab for a task without one)
INIT_GRAMMAR = 'vocab, random, instruction, text:"some words" or from:PATH (a saved soft prompt)'
# What an InitRefused is about: a value outside the grammar, a text without a token for the model,
# a saved soft prompt with another number of vectors than asked for.
NOT_AN_INIT, NO_TOKENS, OTHER_TOKENS = "not an init", "no tokens", "other tokens"


@dataclass(frozen=True)
class Init:
    """A soft-prompt init, read by ``parse_init``."""

    kind: str  # "vocab", "random", "instruction", "text" or "from"
    text: str = ""  # text: the words, without the spaces and double quotes around them
    source: Path | None = None  # from: the folder of the saved soft prompt


class InitRefused(UserError):
    """An init the lm layer refuses, with what the run layer needs to word it as the user wrote the
    options (run/validate.init_refusal): ``problem`` (NOT_AN_INIT, NO_TOKENS or OTHER_TOKENS), the init
    ``value`` and, for OTHER_TOKENS, the saved soft prompt's vectors (``found``) and those ``asked`` for.
    Its own message names no option: the lm layer does not know how they are spelled."""

    def __init__(self, message: str, problem: str, value: object, found: int | None = None,
                 asked: int | None = None):
        super().__init__(message)
        self.problem, self.value, self.found, self.asked = problem, value, found, asked


def parse_init(value: object) -> Init:
    """The one reader of the init grammar: ``vocab``, ``random``, ``instruction``, ``text:WORDS`` (WORDS
    not empty once the spaces and double quotes around them are removed) or ``from:PATH``; anything
    else is an InitRefused (NOT_AN_INIT)."""
    if value in ("vocab", "random", INIT_INSTRUCTION):
        return Init(str(value))
    if isinstance(value, str) and value.startswith(INIT_TEXT):
        text = value[len(INIT_TEXT):].strip().strip('"')
        if text:
            return Init("text", text=text)
    if isinstance(value, str) and value.startswith(INIT_FROM):
        return Init("from", source=Path(value[len(INIT_FROM):].strip()))
    raise InitRefused(f"unknown soft-prompt init {shown(value)}: use {INIT_GRAMMAR}", NOT_AN_INIT, value)


def init_used(init: str, instruction: str | None) -> str:
    """What ``init`` starts a soft prompt from on a task whose instruction is ``instruction``: ``vocab`` for
    ``instruction`` when the task has none (``SoftPrompt.initialise``), else ``init`` itself."""
    if init == INIT_INSTRUCTION and not (instruction or "").strip():
        return "vocab"
    return init


def check_warm_start(value: str, found: int, asked: int) -> None:
    """A warm start's saved soft prompt must have the ``asked`` number of vectors: InitRefused
    (OTHER_TOKENS) when it has ``found``."""
    if found != asked:
        raise InitRefused(f"soft-prompt init {shown(value)}: that soft prompt has {found} virtual tokens, "
                          f"{asked} are asked for", OTHER_TOKENS, value, found, asked)


def init_from(folder: str | Path) -> str:
    """The init that warm-starts from the saved soft prompt in ``folder``."""
    return f"{INIT_FROM}{folder}"


def init_source(init: object) -> Path | None:
    """The adapter folder of a ``from:PATH`` init, else None (also for a value outside the grammar)."""
    try:
        return parse_init(init).source
    except InitRefused:
        return None


def adapter_shape(folder: str | Path) -> tuple[int, ...]:
    """The shape of a saved soft prompt's ``prompt_embeddings``, read from the safetensors header (no
    tensor is loaded); a UserError when the folder holds no readable soft prompt."""
    weights = Path(folder) / ADAPTER_WEIGHTS
    if not weights.is_file():
        raise UserError(f"no soft prompt at {folder}: expected {ADAPTER_WEIGHTS} (and {ADAPTER_CONFIG}), "
                        "the soft_prompt/ folder a soft-prompt run writes")
    check_format(folder)
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
    return init_from(f"sha256:{adapter_digest(source)}")


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


def check_format(folder: str | Path) -> dict:
    """A saved soft prompt's notes (``read_meta``); a UserError naming both versions when softeval saved
    the folder in another format version, or in none (before it recorded one). Without readable notes
    (an adapter softeval did not save, or damaged notes) the folder is PEFT's format alone, read so."""
    meta = read_meta(folder)
    found = meta.get("format_version")
    if meta and found != SOFT_PROMPT_FORMAT_VERSION:
        said = "no format_version, so was saved before softeval recorded one" if found is None \
            else f"format_version {shown(found)}"
        raise UserError(f"the soft prompt {folder} has {said} (in its {SOFTEVAL_META}); this softeval "
                        f"reads format_version {SOFT_PROMPT_FORMAT_VERSION}: tune it again with this softeval "
                        "(rerun the run that saved it with --force), or use the softeval that saved it")
    return meta


class SoftPrompt(torch.nn.Module):
    """``weight``: [num_virtual_tokens, hidden_size], kept in float32 and cast when injected.

    A ``methods.part.TrainedPart`` that enters the forward pass before the prompt's embeddings (``soft``). ``init``:
    what it started from; ``init_from``: the warm start's record (``init_record``) or None; ``loaded_from``: the
    saved soft prompt it was read from, to be scored without tuning, or None."""

    what, enters = "soft prompt", INPUT_PREFIX

    def __init__(self, embeddings: torch.Tensor, init: str = "vocab"):
        super().__init__()
        self.weight = torch.nn.Parameter(embeddings.detach().float().clone())
        self.init = init
        self.init_from: dict | None = None
        self.loaded_from: str | None = None

    @property
    def num_tokens(self) -> int:
        return self.weight.shape[0]

    @property
    def soft(self) -> torch.Tensor:
        return self.weight

    def trainable(self) -> dict[str, torch.nn.Parameter]:
        return {"soft": self.weight}  # the checkpoint's name of it (store/checkpoint.py)

    def tuning(self, model: torch.nn.Module, on: bool) -> None:
        """Nothing in the model changes between tuning and scoring a soft prompt."""

    def record(self, summary: dict) -> dict:
        """results.json's ``tuning``: the loop's summary, its ``init`` what the soft prompt started from (vocab for
        --init instruction on a task without one), and the warm start's source where there was one."""
        summary["init"] = self.init
        if self.init_from is not None:
            summary["init_from"] = self.init_from
        return summary

    @classmethod
    def initialise(cls, lm: LoadedModel, num_tokens: int = 10, how: str = "vocab",
                   seed: int = 0, instruction: str = "") -> SoftPrompt:
        """``vocab``: embeddings of randomly sampled (non-special) vocabulary tokens; ``random``:
        Gaussian with the embedding table's scale; ``text:...``: embeddings of that text's tokens,
        repeated or cut to ``num_tokens``; ``instruction``: the embeddings of the last ``num_tokens``
        tokens of ``instruction`` (the task's: its words on the answer's form come last), repeated
        when it has fewer, or ``vocab`` when it is empty; ``from:PATH``: a saved soft prompt (warm start), which must
        have ``num_tokens`` vectors of the model's hidden size (checked: a one-line UserError). An init
        outside the grammar, a text without a token, or a soft prompt of another size: InitRefused."""
        init = parse_init(how)
        embed = lm.model.get_input_embeddings()
        generator = torch.Generator().manual_seed(seed)
        if init.kind == INIT_INSTRUCTION:
            ids = lm.tokenizer(instruction.strip(), add_special_tokens=False).input_ids if instruction.strip() else []
            if ids:
                return cls(_embed_ids(embed, (ids * num_tokens)[-num_tokens:]), init=how)
            init, how = Init("vocab"), "vocab"  # what it starts from, as the saved soft prompt records it
        if init.kind == "vocab":
            special = set(getattr(lm.tokenizer, "all_special_ids", []) or [])
            vocab = min(embed.num_embeddings, len(lm.tokenizer))
            ids = []
            while len(ids) < num_tokens:
                cand = int(torch.randint(0, vocab, (1,), generator=generator))
                if cand not in special:
                    ids.append(cand)
            vectors = _embed_ids(embed, ids)
        elif init.kind == "random":
            table = _embed_ids(embed, list(range(min(embed.num_embeddings, 4096))))
            vectors = torch.randn(num_tokens, table.shape[1], generator=generator) * table.std()
        elif init.kind == "text":
            ids = lm.tokenizer(init.text, add_special_tokens=False).input_ids
            if not ids:
                raise InitRefused(f"soft-prompt init {shown(how)}: the text has no tokens for model "
                                  f"{lm.name}", NO_TOKENS, how)
            vectors = _embed_ids(embed, (ids * num_tokens)[:num_tokens])
        else:
            loaded = cls.load(init.source, lm)
            check_warm_start(how, loaded.num_tokens, num_tokens)
            vectors = loaded.weight.detach()
        return cls(vectors, init=how)

    def save(self, folder: Path, lm: LoadedModel, extra: dict | None = None) -> None:
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
        meta = {"format_version": SOFT_PROMPT_FORMAT_VERSION, "placement": "before-bos", "init": self.init,
                "model": lm.name, **(extra or {})}
        (folder / SOFTEVAL_META).write_text(json.dumps(meta, indent=2))

    @classmethod
    def load(cls, folder: str | Path, lm: LoadedModel) -> SoftPrompt:
        """Read a PEFT prompt-tuning adapter and check that it fits ``lm`` (and, when softeval saved it,
        that it is of this format version: ``check_format``)."""
        folder = Path(folder)
        weights = folder / ADAPTER_WEIGHTS
        if not weights.is_file():
            raise UserError(f"no soft prompt at {folder}: expected {ADAPTER_WEIGHTS} (and {ADAPTER_CONFIG})")
        meta = check_format(folder)
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
        init = meta.get("init")
        return cls(prompt, init=init if isinstance(init, str) else "vocab")


def _embed_ids(embed: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return embed(torch.tensor(ids, device=embed.weight.device)).float().cpu()


def layout_inputs(lm: LoadedModel, seqs, soft: torch.Tensor | None = None,
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
