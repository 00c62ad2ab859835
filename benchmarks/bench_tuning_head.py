"""Tuning step time with the vocabulary head only at target positions vs on rows x longest target.

Not a test. One process, one loaded model, the real tuning batches of each task (the seeded plan a
`softeval run` draws, prompts and targets as it builds them); the two paths alternate batch by batch
(order flipped every batch) after one warm-up each, with the same soft prompt. Each step is
``tuning_loss.target_loss_backward`` (forward, backward, gradient into the soft prompt). Prints one row
per task and, as the last line, JSON.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_tuning_head.py --model gemma-3-270m \\
        --tasks gsm8k,math500,mmlu --batches 3

Peak memory cannot be told apart in one process; ``--only target`` or ``--only plain`` runs one path
alone (no warm-up, no alternation) and reports the process's peak RSS; run it once per path.

"head positions" counts the positions the head runs on over the timed batches: the plain path
runs it on (rows x (longest target + 1)) per forward pass, the target path on the target tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from rich.console import Console

from softeval.lm import batching, memory, tuning_loss
from softeval.lm.softprompt import SoftPrompt
from softeval.run.config import RunConfig
from softeval.run.pipeline import Job
from softeval.run.tune import batches


def head_positions(pairs, batch, budget: int) -> tuple[int, int]:
    lengths = [len(pairs[i][0]) + len(pairs[i][1]) for i in batch]
    plain = target = 0
    for rows in batching.tuning_passes(lengths, budget):
        targets = [len(pairs[batch[r]][1]) for r in rows]
        plain += len(rows) * (max(targets) + 1)
        target += sum(targets)
    return plain, target


def tuning_setup(job: Job, n_batches: int):
    """The first ``n_batches`` of the run's seeded plan, their (prompt, target) ids, a fresh soft prompt."""
    cfg = job.config
    plan = batches(len(job.train), cfg.batch_size, n_batches, cfg.seed)
    pairs = {i: (job.prompter.ids(job.train[i], "soft-prompt"), job.prompter.target_ids(job.train[i]))
             for b in plan for i in b}
    return plan, pairs, SoftPrompt.initialise(job.lm, cfg.tokens, cfg.init, cfg.seed).to(job.lm.device)


def bench_task(job: Job, n_batches: int) -> dict:
    lm, cfg = job.lm, job.config
    plan, pairs, soft = tuning_setup(job, n_batches + 1)  # the extra batch is the warm-up
    budget = memory.tuning_pass_tokens(lm)
    head = tuning_loss.target_head(lm)
    if head is None:
        raise SystemExit(f"{cfg.model}: the target-position head is not used for this model; nothing to compare")

    def step(batch, use_head: bool) -> tuple[float, float]:
        tuning_loss._TARGET_HEADS[lm.model] = head if use_head else None
        soft.weight.grad = None
        started = time.perf_counter()
        loss = tuning_loss.target_loss_backward(lm, [pairs[i][0] for i in batch], [pairs[i][1] for i in batch],
                                                soft.weight, budget)
        return time.perf_counter() - started, loss

    step(plan[-1], True), step(plan[-1], False)  # warm-up
    seconds = {True: 0.0, False: 0.0}
    worst = 0.0
    for k, batch in enumerate(plan[:n_batches]):
        losses = {}
        for use_head in ((True, False) if k % 2 == 0 else (False, True)):
            dt, losses[use_head] = step(batch, use_head)
            seconds[use_head] += dt
        worst = max(worst, abs(losses[True] - losses[False]) / max(abs(losses[False]), 1e-9))
    tuning_loss._TARGET_HEADS[lm.model] = head
    plain_pos = target_pos = 0
    for batch in plan[:n_batches]:
        p, t = head_positions(pairs, batch, budget)
        plain_pos, target_pos = plain_pos + p, target_pos + t
    return {"task": cfg.task, "batches": n_batches,
            "s_per_step_target_head": round(seconds[True] / n_batches, 3),
            "s_per_step_plain": round(seconds[False] / n_batches, 3),
            "speedup": round(seconds[False] / seconds[True], 3),
            "head_positions_plain": plain_pos, "head_positions_target": target_pos,
            "max_rel_loss_diff": worst}


def one_path(job: Job, n_batches: int, use_head: bool) -> dict:
    """Only one path, for its peak memory: the process's peak RSS after ``n_batches`` tuning steps."""
    lm = job.lm
    plan, pairs, soft = tuning_setup(job, n_batches)
    if not use_head:
        tuning_loss._TARGET_HEADS[lm.model] = None
    started = time.perf_counter()
    for batch in plan:
        soft.weight.grad = None
        tuning_loss.target_loss_backward(lm, [pairs[i][0] for i in batch], [pairs[i][1] for i in batch], soft.weight)
    return {"task": job.config.task, "path": "target" if use_head else "plain", "batches": n_batches,
            "s_per_step": round((time.perf_counter() - started) / n_batches, 3),
            "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--tasks", default="gsm8k,math500,mmlu")
    ap.add_argument("--batches", type=int, default=3, help="timed tuning batches per task and path")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--only", choices=("target", "plain"), help="run one path alone and report its peak RSS")
    args = ap.parse_args(argv)
    console = Console(stderr=True)
    lm, rows = None, []
    for task in args.tasks.split(","):
        job = Job(RunConfig(model=args.model, task=task, methods=("soft-prompt",), device=args.device,
                            dtype=args.dtype), console, _lm=lm)
        job.prepare()
        lm = job.lm
        if args.only:
            rows.append(one_path(job, args.batches, args.only == "target"))
            console.print(rows[-1])
            continue
        row = bench_task(job, args.batches)
        rows.append(row)
        console.print(f"{task}: {row['s_per_step_plain']:.2f} s/step plain, {row['s_per_step_target_head']:.2f} "
                      f"s/step target head ({row['speedup']:.2f}x); head positions {row['head_positions_plain']} "
                      f"-> {row['head_positions_target']}; max relative loss difference {row['max_rel_loss_diff']:.1e}")
    print(json.dumps({"model": args.model, "threads": torch.get_num_threads(), "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
