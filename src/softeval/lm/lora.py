"""A LoRA adapter on a loaded model (``--method lora``: train-before-test, docs/reference/protocol.md).

PEFT's LoRA layers are put into the loaded model in place (``peft.get_peft_model`` replaces the target
linear layers by ones that add ``B(A(x)) * alpha/r`` to the frozen layer's output), so every path that
reads ``lm.model`` (generation, the log-likelihood references, the tuning loss) runs with the adapter on
and nothing else changes; ``detach`` puts the original layers back, bit for bit the model as loaded, for
the methods that follow in the same process. The frozen weights are never written: only A and B train.

B starts at zero, so before the first step the model is the base model exactly. A is drawn from a seeded
generator of its own (the global RNG is left as it was). The adapter's weights are float32 whatever the
model's dtype (PEFT casts the layer's input to them), as the soft prompt's are.

The saved folder is PEFT's LoRA format (``adapter_config.json``, ``adapter_model.safetensors``), loadable
by ``peft.PeftModel.from_pretrained``, with softeval's notes beside it (``softeval.json``).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from softeval.constants import LORA_FORMAT_VERSION
from softeval.errors import UserError
from softeval.lm.models import LoadedModel
from softeval.lm.settings import ALL_LINEAR, LORA_TARGETS  # the default targets, and PEFT's every-linear
from softeval.lm.softprompt import SOFTEVAL_META
from softeval.methods.part import ADAPTER

PEFT_MISSING = "--method lora needs peft, which is not installed: pip install 'softeval[peft]'"


def peft_module():
    """peft, or a UserError saying how to install it."""
    try:
        import peft
    except ImportError:
        raise UserError(PEFT_MISSING) from None
    return peft


def parse_targets(text: str) -> tuple[str, ...]:
    """``q_proj,k_proj`` as a tuple of layer names; ``all-linear`` as itself."""
    return tuple(t.strip() for t in str(text).split(",") if t.strip())


@dataclass(frozen=True)
class LoraSettings:
    """What defines an adapter besides the model: rank, scale, dropout while tuning, target layers."""

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = LORA_TARGETS

    def record(self) -> dict:
        return {**asdict(self), "targets": list(self.targets)}


class LoraAdapter:
    """A LoRA adapter put into ``lm.model``; what tuning trains (run/tuning_loop.py) and what a lora run scores: a
    ``methods.part.TrainedPart`` that enters the forward pass as layers in the model (``soft``: no vectors before the
    prompt). ``method``: the run's method, which its saved folder records."""

    what, enters, soft, loaded_from = "adapter", ADAPTER, None, None
    method: str | None = None  # set by the maker (run/parts.py)

    def __init__(self, lm: LoadedModel, settings: LoraSettings, seed: int = 0):
        peft = peft_module()
        self.lm, self.settings = lm, settings
        targets = settings.targets[0] if settings.targets == (ALL_LINEAR,) else list(settings.targets)
        config = peft.LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                                 target_modules=targets, bias="none", task_type="CAUSAL_LM")
        was_training = lm.model.training
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            try:
                with warnings.catch_warnings():  # transformers' deprecation of a name peft still reads
                    warnings.filterwarnings("ignore", category=FutureWarning, message=".*gradient_checkpointing")
                    self._peft = peft.get_peft_model(lm.model, config)
            except ValueError as err:  # no layer of that name in this model
                raise UserError(f"LoRA target layers {','.join(settings.targets)}: {str(err).splitlines()[0]} "
                                f"(model {lm.name}); name its linear layers, or give {ALL_LINEAR}") from None
        lm.model.train(was_training)
        self._params = {name: p for name, p in lm.model.named_parameters() if p.requires_grad}
        for p in self._params.values():
            p.data = p.data.float()  # the optimizer's precision, whatever the model's dtype
        self.attached = True

    def trainable(self) -> dict[str, torch.nn.Parameter]:
        """The trainable tensors by name (the checkpoint's keys), A and B of every target layer."""
        return self._params

    def n_trainable(self) -> int:
        return sum(p.numel() for p in self._params.values())

    def tuning(self, model: torch.nn.Module, on: bool) -> None:
        """Dropout on the adapter's input while tuning steps run on ``model`` (the loaded model, or its copy
        in the tuning dtype: lm.precision), none while it is scored."""
        for name, module in model.named_modules():
            if ".lora_dropout." in name + ".":
                module.train(on)

    def record(self, summary: dict) -> dict:
        """results.json's ``tuning``: the loop's summary without the soft prompt's settings, which a lora run does
        not read, and with the adapter's."""
        for key in ("num_tokens", "init"):
            summary.pop(key, None)
        summary["lora"] = self.settings.record()
        return summary

    def save(self, folder: Path, lm: LoadedModel | None = None, extra: dict | None = None) -> None:
        """PEFT's LoRA folder (config and weights) and softeval's notes beside it (the adapter's own model: ``lm``
        is the protocol's, not read)."""
        method = self.method
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self._peft.peft_config["default"].base_model_name_or_path = self.lm.name
        # the embeddings are never tuned: no look-up of the base model's files to find whether they were
        self._peft.save_pretrained(str(folder), save_embedding_layers=False)
        (folder / "README.md").unlink(missing_ok=True)  # PEFT's blank model card: nothing of this run in it
        meta = {"format_version": LORA_FORMAT_VERSION, "method": method, "model": self.lm.name,
                "lora": self.settings.record(), "trainable_parameters": self.n_trainable(), **(extra or {})}
        (folder / SOFTEVAL_META).write_text(json.dumps(meta, indent=2))

    def detach(self) -> None:
        """Put the model's own layers back (the adapter's are dropped): the model as loaded."""
        if self.attached:
            self._peft.unload()
            self.attached = False


@contextmanager
def attached(lm: LoadedModel, settings: LoraSettings, seed: int = 0) -> Iterator[LoraAdapter]:
    """A LoRA adapter on ``lm`` for the block's duration: detached however the block ends."""
    adapter = LoraAdapter(lm, settings, seed)
    try:
        yield adapter
    finally:
        adapter.detach()

