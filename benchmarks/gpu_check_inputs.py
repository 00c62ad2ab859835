"""What the GPU check (gpu_check.py) runs on: the models' shapes and each plan's amount of work, the
check's tokenizer and prompts (``check_assets/``, built as a run of an instruction-tuned model builds them),
Llama models with random weights, and the timing helpers that every section uses.

Imported by gpu_check.py, which puts the repository's ``src/`` on the path first.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from softeval.lm.models import LoadedModel
from softeval.run.prompting import Prompter
from softeval.tasks import get_task
from softeval.tasks.base import Example

ASSETS = Path(__file__).resolve().parent / "check_assets"
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
PAD, EOS = "<|endoftext|>", "<|im_end|>"

# Shapes of Llama-3.2-1B and Llama-3.1-8B (the vocabulary size too: the head's cost is real even
# though the check's tokenizer uses only its first 4,096 ids).
SHAPES = {
    "llama_1b": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                     intermediate_size=8192, vocab_size=128256, tie_word_embeddings=True),
    "llama_8b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                     intermediate_size=14336, vocab_size=128256, tie_word_embeddings=False),
}
TINY_SHAPES = {  # heads of 32: vLLM's CPU attention takes no smaller head (--tiny runs the vLLM section on CPU)
    "llama_1b": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                     intermediate_size=128, vocab_size=4096, tie_word_embeddings=True),
    "llama_8b": dict(hidden_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=256, vocab_size=4096, tie_word_embeddings=False),
}
AGREE_SHAPE = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                   intermediate_size=512, vocab_size=4096, tie_word_embeddings=True)
TINY_AGREE_SHAPE = dict(AGREE_SHAPE, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, intermediate_size=128)

# How much work each section does: the GPU plan fits in a few minutes on one H200, the tiny plan
# in seconds on a CPU.
PLANS = {
    "gpu": {"tune_steps": 6, "warmup_steps": 2, "gen_items": 64, "fewshot_items": 32, "loglik_items": 64,
            "long_tokens": 4096, "long_items": 48, "agree_items": 16, "agree_new_tokens": 16, "peak_n": None,
            "peak_seconds": 1.0, "max_batch_size": 64, "max_prompt_tokens": None},
    "tiny": {"tune_steps": 1, "warmup_steps": 1, "gen_items": 4, "fewshot_items": 2, "loglik_items": 4,
             "long_tokens": 96, "long_items": 3, "agree_items": 4, "agree_new_tokens": 4, "peak_n": 128,
             "peak_seconds": 0.02, "max_batch_size": 2, "max_prompt_tokens": 48},
}
BATCH, SOFT_TOKENS = 8, 10


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device, fn):
    sync(device)
    t0 = time.perf_counter()
    value = fn()
    sync(device)
    return value, time.perf_counter() - t0


# ---- tokenizer, prompts, models --------------------------------------------------------------

def load_tokenizer() -> PreTrainedTokenizerFast:
    tok = PreTrainedTokenizerFast(tokenizer_file=str(ASSETS / "tokenizer.json"), eos_token=EOS, pad_token=PAD,
                                  unk_token=PAD)
    tok.chat_template = CHATML
    return tok


class Prompts:
    """Token ids of the check's items as ``softeval run`` builds them for an instruction-tuned model (chat
    template on), through softeval's ``Prompter`` and the task's own definition: zero-shot and 5-shot prompts,
    soft-prompt targets (ending in the template's end-of-turn token), the option letters' continuations."""

    def __init__(self, tok, max_tokens: int | None = None):
        self.tok = tok
        self.max_tokens = max_tokens  # tiny plan: prompts cut to their last tokens (the question)
        self.eos = tok.convert_tokens_to_ids(EOS)
        # what a Prompter reads of a model: its tokenizer (chat template, encoding) and EOS ids
        self.lm = SimpleNamespace(tokenizer=tok, eos_ids=(self.eos,), name="gpu_check")
        data = json.loads((ASSETS / "items.json").read_text())
        self.shots = {task: [example(e) for e in spec["shots"]] for task, spec in data.items()}
        self.items = {task: [example(e) for e in spec["items"]] for task, spec in data.items()}

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False).input_ids)

    def prompter(self, task: str, shots: list[Example] | None = None) -> Prompter:
        return Prompter(self.lm, get_task(task), chat=True,
                        shots=self.shots[task] if shots is None else shots)

    def examples(self, task: str, n: int) -> list[Example]:
        items = self.items[task]
        return (items * (n // len(items) + 1))[:n]

    def cut(self, ids: list[int]) -> list[int]:
        return ids[-self.max_tokens:] if self.max_tokens else ids

    def prompts(self, task: str, n: int, shots: int = 0) -> list[list[int]]:
        prompter = self.prompter(task, self.shots[task][:shots])
        method = "few-shot" if shots else "zero-shot"
        return [self.cut(prompter.ids(e, method)) for e in self.examples(task, n)]

    def tuning(self, n: int) -> tuple[list[list[int]], list[list[int]]]:
        prompter = self.prompter("mmlu")
        items = self.examples("mmlu", n)
        return ([self.cut(prompter.ids(e, "soft-prompt")) for e in items],
                [prompter.target_ids(e, "soft-prompt") for e in items])

    def options(self, n: int) -> list[list[list[int]]]:
        prompter = self.prompter("mmlu")
        return [prompter.option_ids(e) for e in self.examples("mmlu", n)]

    def long(self, n: int, tokens: int) -> list[list[int]]:
        """MMLU questions behind as many shots (repeated) as make about ``tokens`` tokens."""
        shots, first = self.shots["mmlu"], self.items["mmlu"][0]
        five = self.prompter("mmlu")
        shot_ids = len(five.ids(first, "few-shot")) - len(five.ids(first, "zero-shot"))
        prompter = self.prompter("mmlu", shots * (tokens // max(1, shot_ids) + 1))  # then cut to ``tokens``
        return [prompter.ids(e, "few-shot")[-(tokens - 8 * (k % 4)):]  # slightly ragged, as real batches are
                for k, e in enumerate(self.examples("mmlu", n))]


def example(row: dict) -> Example:
    """An item of check_assets/items.json (a dataclass ``Example`` as JSON) back as one."""
    return Example(row["id"], row["fields"], row["gold"], tuple(row["aliases"]), tuple(row["options"]))


def build_model(shape: dict, device, dtype, seed: int = 0, std: float = 0.02) -> LlamaForCausalLM:
    """A Llama-style model with random weights, built on ``device`` (no CPU copy of an 8B model):
    matrices N(0, std), norms 1. Explicit init, so the weights do not depend on the transformers
    version's init code."""
    config = LlamaConfig(**shape, max_position_embeddings=8192, rope_theta=500000.0, bos_token_id=None,
                         eos_token_id=2, pad_token_id=0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # as from_pretrained(dtype=...) builds: no fp32 copy of the weights
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    cast_params(model, dtype)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.normal_(0.0, std, generator=gen)
            else:
                p.fill_(1.0)
    model.eval()
    model.requires_grad_(False)
    return model


def cast_params(model, dtype) -> None:
    """Parameters to ``dtype``; buffers (the rotary ``inv_freq``, kept fp32 by transformers) as they are."""
    for p in model.parameters():
        if p.dtype != dtype:
            p.data = p.data.to(dtype)


def loaded(model, tok, name: str) -> LoadedModel:
    lm = LoadedModel(model, tok, name, "post-trained", "gpu_check", pad_id=tok.convert_tokens_to_ids(PAD),
                     eos_ids=(tok.convert_tokens_to_ids(EOS),))
    lm.load_seconds = 0.0
    return lm


def soft_prompt(lm, seed: int = 1) -> torch.Tensor:
    """A soft prompt as ``SoftPrompt.initialise`` makes one: fp32 embeddings of random vocabulary ids."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, len(lm.tokenizer), (SOFT_TOKENS,), generator=gen).to(lm.device)
    with torch.no_grad():
        return lm.model.get_input_embeddings()(ids).float().clone()

