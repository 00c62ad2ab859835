"""Generation with and without softeval.lm.skinny (few-row linears as W @ x^T on CPU), side by side.

Not a test. For each section: the same prompts through ``generation.generate`` (batch 8) with the path
on and off, interleaved over 2 rounds; prints the best time of each, the gain and how many outputs
are identical. BENCHMARKS.md, "Decoding on CPU".

    .venv/bin/python benchmarks/bench_skinny.py --model smollm2-135m-instruct
"""

from __future__ import annotations

import argparse
import time

import torch

from softeval.lm import generation, skinny
from softeval.lm.models import load_model
from softeval.run.prompting import Prompter, pick_shots, use_chat_template
from softeval.tasks import get_task
from softeval.tasks.data import seeded_subset

SECTIONS = (("gsm8k", 8, "zero-shot"), ("mmlu", 24, "zero-shot"), ("gsm8k", 8, "few-shot"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    lm = load_model(args.model)
    for name, n, method in SECTIONS:
        task = get_task(name)
        split = task.load("offline")
        prompter = Prompter(lm, task, use_chat_template(lm, "auto"), pick_shots(split.tune, 5, 0))
        seqs = [prompter.ids(e, method) for e in seeded_subset(split.eval, n, 0)]
        generation.generate(lm, seqs[:2], max_new_tokens=4, stop=task.stop)  # warm-up
        seconds: dict[bool, list[float]] = {True: [], False: []}
        outputs: dict[bool, list[str]] = {}
        for r in range(2):
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                skinny.ENABLED = on
                t0 = time.perf_counter()
                outputs[on] = generation.generate(lm, seqs, max_new_tokens=task.max_new_tokens, stop=task.stop,
                                                  batch_size=8).texts
                seconds[on].append(time.perf_counter() - t0)
        skinny.ENABLED = None  # back to the per-host default
        fast, plain = min(seconds[True]), min(seconds[False])
        same = sum(a == b for a, b in zip(outputs[True], outputs[False]))
        print(f"{args.model} {name} {method}, {n} items: W @ x^T {fast:.1f} s, F.linear {plain:.1f} s, "
              f"gain {plain / fast:.2f}x, identical outputs {same}/{n}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
