"""Cloze option scoring with an item's options side by side in one row vs one row per option.

Not a test. The cloze reference of ``softeval run`` (``pipeline.cloze_scores``: each option's text
after the item's cloze prompt, under the method's context) on seeded test items, scored with
``loglik.BLOCK_OPTIONS`` on (all options of an item in one row after its cached context, a
block-causal mask) and off (one row per option, each with a copy of its item's cache rows). Each
layout runs in a process of its own, alternating over ``--rounds``, so the peak RSS of each is its
own; prints the time and peak RSS of each run, the largest score difference and whether every
item picks the same option. BENCHMARKS.md, "The 5-shot cloze no longer copies each item's cache per option".

    .venv/bin/python benchmarks/bench_cloze.py --method few-shot --limit 100
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch


def one(args) -> dict:
    from softeval.lm import loglik
    from softeval.lm.models import load_model
    from softeval.run.prompting import Prompter, pick_shots, use_chat_template
    from softeval.tasks import get_task
    from softeval.tasks.data import seeded_subset

    torch.set_num_threads(args.threads)
    loglik.BLOCK_OPTIONS = args.layout == "block"
    lm = load_model(args.model)
    task = get_task(args.task)
    split = task.load("offline")
    prompter = Prompter(lm, task, use_chat_template(lm, "auto"), pick_shots(split.tune, 5, 0))
    pairs = [prompter.cloze_ids(e, args.method) for e in seeded_subset(split.eval, args.limit, 0)]
    loglik.option_logprobs(lm, [c for c, _ in pairs[:2]], [o for _, o in pairs[:2]], batch_size=16)  # warm-up
    t0 = time.perf_counter()
    scores = loglik.option_logprobs(lm, [c for c, _ in pairs], [o for _, o in pairs], batch_size=16)
    seconds = time.perf_counter() - t0
    return {"layout": args.layout, "seconds": round(seconds, 2), "block_used": loglik.block_options_usable(lm),
            "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2), "scores": scores}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--task", default="mmlu")
    ap.add_argument("--method", default="few-shot", choices=("zero-shot", "few-shot"))
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layout", choices=("block", "rows"), help=argparse.SUPPRESS)  # one child process
    args = ap.parse_args(argv)
    if args.layout:
        print(json.dumps(one(args)))
        return 0
    runs: dict[str, list[dict]] = {"block": [], "rows": []}
    for r in range(args.rounds):
        for layout in (("block", "rows") if r % 2 == 0 else ("rows", "block")):
            cmd = [sys.executable, __file__, "--layout", layout, "--model", args.model, "--task", args.task,
                   "--method", args.method, "--limit", str(args.limit), "--threads", str(args.threads)]
            out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            runs[layout].append(out)
            print(f"{layout}: {out['seconds']} s, peak RSS {out['peak_rss_gb']} GB"
                  + ("" if out["block_used"] == (layout == "block") else " (block layout NOT used)"), flush=True)
    a, b = runs["block"][0]["scores"], runs["rows"][0]["scores"]
    diff = max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))
    same = sum(max(range(len(ra)), key=ra.__getitem__) == max(range(len(rb)), key=rb.__getitem__) for ra, rb in zip(a, b))
    best = {k: min(r["seconds"] for r in v) for k, v in runs.items()}
    print(f"{args.model} {args.task} {args.method} cloze, {len(a)} items: block {best['block']} s, "
          f"rows {best['rows']} s, gain {best['rows'] / best['block']:.2f}x; peak RSS block "
          f"{max(r['peak_rss_gb'] for r in runs['block'])} GB, rows {max(r['peak_rss_gb'] for r in runs['rows'])} GB; "
          f"largest score difference {diff:.2e}; same pick {same}/{len(a)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
