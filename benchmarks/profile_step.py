"""Where the time of one tuning step and one scoring batch goes (torch.profiler), by kind of work.

Not a test. One tuning step (the first batch of ``softeval run``'s seeded plan on the task's tuning
split, soft-prompt prompts and targets, 10 virtual tokens) and one scoring batch (8 zero-shot test
items, greedy generation at the task's ``max_new_tokens``), each after a warm-up. Operators are
grouped: matmul (linear, mm, bmm, addmm), attention (SDPA and its kernels), softmax / norms
(softmax, log-softmax, cross-entropy, the RMSNorm's pow / mean / rsqrt), elementwise (mul, add,
silu, rotary's cat / neg), copies (copy_, cat, index, to, contiguous), other ops; "outside torch
ops" is the wall time no operator accounts for (Python, the engine's loop, tokenizer decode).

    nice -n 10 .venv/bin/python benchmarks/profile_step.py --threads 2 [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from softeval.lm import batching, generation, memory, tuning_loss
from softeval.lm.models import load_model
from softeval.lm.softprompt import SoftPrompt
from softeval.run.prompting import Prompter, pick_shots, use_chat_template
from softeval.run.tune import batches
from softeval.tasks import get_task
from softeval.tasks.data import seeded_subset

GROUPS = (
    ("matmul", ("aten::mm", "aten::bmm", "aten::addmm", "aten::linear", "aten::matmul", "aten::_mkl", "mkldnn")),
    ("attention", ("attention", "sdpa", "_flash", "_efficient")),
    ("softmax/norm", ("softmax", "cross_entropy", "nll_loss", "aten::pow", "aten::mean", "aten::rsqrt")),
    ("elementwise", ("aten::mul", "aten::add", "aten::silu", "aten::neg", "aten::sub", "aten::div", "aten::tanh",
                     "aten::sigmoid", "aten::cos", "aten::sin", "aten::exp", "aten::where", "aten::masked_fill")),
    ("copies/indexing", ("aten::copy_", "aten::cat", "aten::index", "aten::to", "aten::_to_copy", "aten::contiguous",
                         "aten::clone", "aten::gather", "aten::embedding", "aten::stack", "aten::scatter",
                         "aten::fill_", "aten::zero_", "aten::empty", "aten::expand", "aten::slice")),
)


def group_of(name: str) -> str:
    low = name.lower()
    for group, keys in GROUPS:
        if any(k.lower() in low for k in keys):
            return group
    return "other ops"


def shares(prof, wall: float) -> dict:
    """Self time per group (leaf operators only, so nothing is counted twice), as shares of wall time."""
    totals: dict[str, float] = {}
    for evt in prof.key_averages():
        if evt.self_cpu_time_total <= 0:
            continue
        g = group_of(evt.key)
        totals[g] = totals.get(g, 0.0) + evt.self_cpu_time_total / 1e6
    ops = sum(totals.values())
    totals["outside torch ops"] = max(0.0, wall - ops)
    top = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:12]
    return {"wall_s": round(wall, 2), "shares": {k: round(v / wall, 3) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])},
            "top_ops": [(e.key, round(e.self_cpu_time_total / 1e6, 3), e.count) for e in top]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--task", default="mmlu")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    lm = load_model(args.model, dtype=args.dtype)
    task = get_task(args.task)
    splits = task.load("offline")
    prompter = Prompter(lm, task, use_chat_template(lm, "auto"), pick_shots(splits.tune, 5, 0))
    plan = batches(len(splits.tune), 8, 2, seed=0)
    soft = SoftPrompt.initialise(lm, 10, "vocab", 0).to(lm.device)
    opt = torch.optim.AdamW([soft.weight], lr=3e-2)

    def step(batch):
        opt.zero_grad(set_to_none=True)
        tuning_loss.target_loss_backward(lm, [prompter.ids(splits.tune[i], "soft-prompt") for i in batch],
                                         [prompter.target_ids(splits.tune[i]) for i in batch], soft.weight)
        opt.step()

    result = {"model": args.model, "task": args.task, "threads": args.threads,
              "dtype": str(next(lm.model.parameters()).dtype).replace("torch.", "")}
    step(plan[1])  # warm-up
    lengths = [len(prompter.ids(splits.tune[i], "soft-prompt")) + len(prompter.target_ids(splits.tune[i])) for i in plan[0]]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        step(plan[0])
        wall = time.perf_counter() - t0
    result["tune_step"] = {"tokens": sum(lengths), "longest": max(lengths),
                           "passes": len(batching.tuning_passes(lengths, memory.tuning_pass_tokens(lm))),
                           **shares(prof, wall)}
    items = seeded_subset(splits.eval, 8, 0)
    seqs = [prompter.ids(e, "zero-shot") for e in items]
    generation.generate(lm, seqs[:2], max_new_tokens=2, stop=task.stop)  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        generation.generate(lm, seqs, max_new_tokens=task.max_new_tokens, stop=task.stop, batch_size=8)
        wall = time.perf_counter() - t0
    result["score_batch"] = {"tokens": sum(map(len, seqs)), "longest": max(map(len, seqs)),
                             "max_new_tokens": task.max_new_tokens, **shares(prof, wall)}
    for part in ("tune_step", "score_batch"):
        r = result[part]
        print(f"{part}: {r['wall_s']} s, " + ", ".join(f"{k} {v:.0%}" for k, v in r["shares"].items()), file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
