"""Tiny random models and a character-level tokenizer, built inside the tests (no hub, no files)."""

from __future__ import annotations

import string

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from softeval.lm.models import BASE, LoadedModel
from softeval.run.config import RunConfig

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]


def tiny_tokenizer(bos: bool = True) -> PreTrainedTokenizerFast:
    chars = [c for c in string.printable if c not in "\x0b\x0c\r"]
    vocab = {tok: i for i, tok in enumerate(SPECIALS + chars)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    if bos:
        core.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", unk_token="<unk>")


def tiny_model(vocab_size: int, seed: int = 0, layers: int = 2, hidden: int = 32,
               init_range: float = 0.3) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, initializer_range=init_range, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0)
    model = LlamaForCausalLM(config)
    model.eval()
    model.requires_grad_(False)
    return model


def tiny_lm(seed: int = 0, kind: str = BASE, bos: bool = True, **kw) -> LoadedModel:
    tok = tiny_tokenizer(bos=bos)
    model = tiny_model(len(tok), seed=seed, **kw)
    lm = LoadedModel(model, tok, f"tiny-{seed}", kind, "test", pad_id=0, eos_ids=(2,))
    lm.load_seconds = 0.0
    return lm


def plain_target_loss(lm, prompts, targets, soft, weights=None):
    """The tuning loss from the model's own logits at every position: the reference that
    ``tuning_loss.target_loss`` (head only at target positions) must equal; with ``weights`` (one per
    target token) the weighted mean."""
    from softeval.lm.softprompt import layout_inputs

    seqs = [list(p) + list(t) for p, t in zip(prompts, targets)]
    logp = torch.log_softmax(lm.model(**layout_inputs(lm, seqs, soft)).logits.float(), dim=-1)
    width = logp.shape[1]
    picked = [logp[r, width - 1 - len(t) + k, tok] for r, t in enumerate(targets) for k, tok in enumerate(t)]
    w = torch.tensor([1.0] * len(picked) if weights is None else [x for row in weights for x in row])
    return -(torch.stack(picked) * w).sum() / w.sum()


def format_task(n_tune: int = 64, n_eval: int = 24, name: str = "toyformat"):
    """A synthetic format task: the answer must be written as '#<letter>' (the word's first letter).

    A random tiny model almost never starts with '#', so format_rate measures whether tuning taught
    the format."""
    import random
    import re

    from softeval.tasks.base import Example, Splits, Task

    rng = random.Random(0)

    def make(i, split):
        word = "".join(rng.choice("abcdefgh") for _ in range(3))
        return Example(id=f"{split}/{i}", fields={"word": word}, gold=word[0])

    tune = [make(i, "tune") for i in range(n_tune)]
    test = [make(i, "test") for i in range(n_eval)]

    def strict(out, ex):
        found = re.match(r"\s*#([a-z])", out)
        return found.group(1) if found else None

    def lenient(out, ex):
        found = re.search(r"#?([a-z])", out)
        return found.group(1) if found else None

    return Task(
        name=name, description="toy format task", instruction="Write # and the first letter.",
        render=lambda ex: f"Word: {ex.fields['word']}\nAnswer:", target=lambda ex: "#" + ex.gold,
        strict=strict, lenient=lenient, match=lambda a, ex: a == ex.gold,
        load=lambda source="offline", **kw: Splits(list(tune), list(test), "synthetic", "tune", "test"),
        stop=("\n",), max_new_tokens=4)


def toy_config(out, **kw) -> RunConfig:
    """A run of the tiny model on the toy format task (the ``toy`` fixture registers it) into ``out``:
    small enough for a test, every method; keyword arguments override any field."""
    base = dict(model="tiny-0", task="toyformat", limit=12, steps=6, shots=2, tokens=4, lr=0.1,
                out=str(out), curve_every=3, curve_items=4, eval_batch_size=5)
    return RunConfig(**{**base, **kw})


def run_tiny(monkeypatch, out, limit: int, steps: int) -> int:
    """`softeval run` of every method of the toy format task on ``tiny_lm`` (its exit status): the verdict
    tests read what it prints."""
    from softeval.cli import main
    from softeval.run import pipeline

    monkeypatch.setattr(pipeline, "load_lm", lambda config: tiny_lm())
    return main(["run", "--model", "org/tiny", "--task", "toyformat", "--limit", str(limit), "--steps", str(steps),
                 "--shots", "1", "--tokens", "2", "--curve-items", "0", "--out", str(out)])
