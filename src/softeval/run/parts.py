"""The built-in trained parts' makers (methods/part.py ``PartMaker``), named by the soft-prompt and lora methods'
specs: a soft prompt (lm.softprompt), tuned from its init or loaded to be scored again (`softeval eval
--soft-prompt`), and a LoRA adapter put into the model (lm.lora)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from softeval.lm import lora
from softeval.lm.lora import LoraAdapter, LoraSettings, parse_targets
from softeval.lm.models import LoadedModel
from softeval.lm.softprompt import InitRefused, SoftPrompt, init_record
from softeval.methods.part import ADAPTER, INPUT_PREFIX
from softeval.run.config import RunConfig, Spelling
from softeval.run.validate import check_lora, init_refusal


@dataclass(frozen=True)
class SoftPromptMaker:
    """The soft prompt: ``--tokens`` vectors from ``--init``, tuned at ``--lr``; a series' run warm-starts from the
    previous checkpoint's (``--init from:``)."""

    what: str = "soft prompt"
    enters: str = INPUT_PREFIX
    warm_starts: bool = True

    def learning_rate(self, cfg: RunConfig) -> float:
        return cfg.lr

    def check(self, cfg: RunConfig, spelling: Spelling) -> None:
        """Its init and a saved soft prompt are checked with every run's options (run/validate.py)."""

    @contextmanager
    def attached(self, lm: LoadedModel, cfg: RunConfig, method: str, instruction: str,
                 spelling: Spelling) -> Iterator[SoftPrompt]:
        """The saved soft prompt ``--soft-prompt`` names, or one initialised from ``--init`` (an init refused once
        the model is loaded is worded with the options as ``spelling`` spells them)."""
        if cfg.soft_prompt:
            part = SoftPrompt.load(cfg.soft_prompt, lm).to(lm.device)
            part.loaded_from = str(cfg.soft_prompt)
        else:
            part = initialised(lm, cfg.tokens, cfg.init, cfg.seed, instruction, spelling)
            part.init_from = init_record(cfg.init)
        yield part


def initialised(lm: LoadedModel, tokens: int, init: str, seed: int, instruction: str,
                spelling: Spelling) -> SoftPrompt:
    """A soft prompt of ``tokens`` vectors from ``init`` and ``seed``, on the model's device; an init refused once the
    model is loaded is the user's error, naming the option as ``spelling`` spells it."""
    try:
        return SoftPrompt.initialise(lm, tokens, init, seed, instruction).to(lm.device)
    except InitRefused as refused:
        raise init_refusal(refused, spelling) from None


def lora_settings(cfg: RunConfig) -> LoraSettings:
    """The adapter a lora run of ``cfg`` tunes (its --lora-* options)."""
    return LoraSettings(rank=cfg.lora_rank, alpha=float(cfg.lora_alpha), dropout=float(cfg.lora_dropout),
                        targets=parse_targets(cfg.lora_targets))


@dataclass(frozen=True)
class LoraMaker:
    """A LoRA adapter of the --lora-* options, tuned at ``--lora-lr``; in the model while its run tunes and scores,
    and taken out however it ends, so the next method in this process scores the model as loaded."""

    what: str = "adapter"
    enters: str = ADAPTER
    warm_starts: bool = False

    def learning_rate(self, cfg: RunConfig) -> float:
        return cfg.lora_lr

    def check(self, cfg: RunConfig, spelling: Spelling) -> None:
        check_lora(cfg, spelling)

    @contextmanager
    def attached(self, lm: LoadedModel, cfg: RunConfig, method: str, instruction: str,
                 spelling: Spelling) -> Iterator[LoraAdapter]:
        with lora.attached(lm, lora_settings(cfg), cfg.seed) as adapter:
            adapter.method = method
            yield adapter


SOFT_PROMPT = SoftPromptMaker()
LORA = LoraMaker()
