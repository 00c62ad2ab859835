"""The main job's arithmetic: model FLOPs of each phase and the time it would take at the machine's
measured matmul peak (the floor no engine can beat on this host in this dtype).

Not a test. It builds the run exactly as ``softeval run`` does (``pipeline.Job``: the same items,
tuning pool, shots and prompts) and counts, with ``softeval.lm.perf``, the FLOPs over real (unpadded)
tokens of each phase: zero-shot / few-shot / soft-prompt scoring (greedy generation of
``--new-tokens`` tokens per item, plus each item's cloze context once and its options), and the
tuning steps of the seeded plan (forward + activation backward; ``--steps``, the step early stop
ended at in the measured main job) with their curve points (held-out slice generated; its loss read
from the same prefill). The prefix all of a method's prompts share (the instruction, the five shots) is counted once
per chunk of SAVE_EVERY items, as the prefix cache computes it; attention of cloze options over
their cached context is not counted (small).

    .venv/bin/python benchmarks/main_job_floor.py --steps 50
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from rich.console import Console

from softeval.lm import perf
from softeval.lm.batching import common_prefix_len
from softeval.run.config import RunConfig
from softeval.run.pipeline import SAVE_EVERY, Job
from softeval.run.tune import batches


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--task", default="mmlu")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--steps", type=int, default=50, help="tuning steps run (the main job stopped early at 50)")
    ap.add_argument("--new-tokens", type=int, default=2, help="generated tokens per item (MMLU: letter + end)")
    ap.add_argument("--threads", type=int, default=min(2, torch.get_num_threads()))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = RunConfig(model=args.model, task=args.task, limit=args.limit)
    job = Job(cfg, Console(stderr=True))
    job.prepare()
    lm, prompter, task = job.lm, job.prompter, job.task
    shape = perf.Shape.of(lm.model.config)
    n_soft = cfg.tokens

    def forward(seqs: list[int], extra: int) -> float:
        """Forward FLOPs of sequences (lengths) whose shared prefix runs once per chunk of SAVE_EVERY
        items, as the engine's prefix cache does (the rest of each sequence attends to it)."""
        shared = prefix_len[0] if seqs else 0
        one = lambda n: perf.scoring_flops(shape, [(n, 0)])
        chunks = -(-len(seqs) // SAVE_EVERY)
        return sum(one(n + extra) - one(shared + extra) for n in seqs) + chunks * one(shared + extra)

    def scoring(method: str, extra: int = 0) -> dict:
        ids = [prompter.ids(e, method) for e in job.items]
        prefix_len[0] = common_prefix_len(ids)
        gen = forward([len(x) for x in ids], extra) + perf.scoring_flops(
            shape, [(0, args.new_tokens)]) * len(ids)  # the decode steps and the head
        cloze = 0.0
        if task.cloze is not None:
            pairs = [prompter.cloze_ids(e, method) for e in job.items]
            prefix_len[0] = common_prefix_len([c for c, _ in pairs])
            cloze = forward([len(c) for c, _ in pairs], extra)
            cloze += sum(perf.scoring_flops(shape, [(len(o), len(o))]) for _, opts in pairs for o in opts)
        return {"generation": gen, "cloze": cloze, "prompt_tokens": sum(map(len, ids))}

    prefix_len = [0]
    plan = batches(len(job.train), cfg.batch_size, args.steps, seed=cfg.seed)
    rows = lambda batch: [(n_soft + len(prompter.ids(job.train[i], "soft-prompt"))
                           + len(prompter.target_ids(job.train[i])), len(prompter.target_ids(job.train[i])))
                          for i in batch]
    tune_steps = sum(perf.tuning_step_flops(shape, rows(b)) for b in plan)
    points = args.steps // cfg.curve_every + 1
    curve_rows = [(n_soft + len(prompter.ids(e, "soft-prompt")), args.new_tokens) for e in job.curve_items]
    # the held-out loss comes from the generation's prefill: only the targets' own tokens are extra
    loss_rows = [(len(prompter.target_ids(e)), 0) for e in job.curve_items]
    curve = points * (perf.scoring_flops(shape, curve_rows) + perf.scoring_flops(shape, loss_rows))
    phases = {"zero-shot": scoring("zero-shot"), "few-shot": scoring("few-shot"),
              "soft-prompt": scoring("soft-prompt", n_soft)}
    peak = perf.matmul_peak(lm.device, next(lm.model.parameters()).dtype)
    out = {"model": args.model, "task": args.task, "limit": args.limit, "threads": args.threads,
           "matmul_peak_gflops": round(peak / 1e9, 1), "steps": args.steps, "curve_points": points,
           "tuning_tokens_per_step": round(sum(sum(r[0] for r in rows(b)) for b in plan) / len(plan), 1)}
    total = 0.0
    for name, p in phases.items():
        flops = p["generation"] + p["cloze"]
        total += flops
        out[name] = {"gflop": round(flops / 1e9, 1), "cloze_gflop": round(p["cloze"] / 1e9, 1),
                     "floor_s": round(flops / peak, 1)}
    out["tuning"] = {"gflop": round((tune_steps + curve) / 1e9, 1), "steps_gflop": round(tune_steps / 1e9, 1),
                     "curve_gflop": round(curve / 1e9, 1), "floor_s": round((tune_steps + curve) / peak, 1)}
    total += tune_steps + curve
    out["total_gflop"] = round(total / 1e9, 1)
    out["floor_s"] = round(total / peak, 1)
    for k in ("zero-shot", "few-shot", "tuning", "soft-prompt"):
        print(f"{k:<12} {out[k]['gflop']:>9.1f} GFLOP  {out[k]['floor_s']:>7.1f} s at the matmul peak", file=sys.stderr)
    print(f"{'total':<12} {out['total_gflop']:>9.1f} GFLOP  {out['floor_s']:>7.1f} s at {out['matmul_peak_gflops']} GFLOP/s",
          file=sys.stderr)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
