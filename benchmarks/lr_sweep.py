"""Pick the default learning rate by measurement: tune on a real model at several learning rates
and print the learning curve (loss; format_rate and accuracy on a held-out tuning slice).

    python benchmarks/lr_sweep.py --model gemma-3-270m --task mmlu --lrs 0.003,0.01,0.03,0.1 --steps 80
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch

from softeval.lm.models import load_model
from softeval.run.prompting import Prompter, use_chat_template
from softeval.run.tune import TuneConfig, tune
from softeval.tasks import get_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="gemma-3-270m")
    parser.add_argument("--task", default="mmlu")
    parser.add_argument("--lrs", default="0.003,0.01,0.03,0.1")
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--curve-every", type=int, default=10)
    parser.add_argument("--curve-items", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    lm = load_model(args.model)
    task = get_task(args.task)
    pool = list(task.load("offline").tune)
    random.Random(args.seed).shuffle(pool)
    curve_items, train = pool[: args.curve_items], pool[args.curve_items:]
    prompter = Prompter(lm, task, use_chat_template(lm, "auto"), [])
    rows = []
    for lr in (float(x) for x in args.lrs.split(",")):
        started = time.time()
        result = tune(lm, prompter, train, curve_items,
                      TuneConfig(steps=args.steps, lr=lr, seed=args.seed, curve_every=args.curve_every,
                                 curve_items=args.curve_items))
        points = [(p["step"], p["format_rate"], p["accuracy"], p["loss"]) for p in result.curve
                  if p["format_rate"] is not None]
        summary = result.summary()
        losses = [p["loss"] for p in result.curve if p["loss"] is not None]
        tail = sum(losses[-10:]) / max(1, len(losses[-10:]))
        print(f"lr={lr:g}: mean loss of the last 10 steps {tail:.3f}, format>=0.9 at step {summary['format_0.9_step']}, "
              f"{time.time() - started:.0f}s")
        print("   step: format/accuracy/loss  " + "  ".join(
            f"{s}: {f:.2f}/{a:.2f}/{'-' if loss is None else f'{loss:.2f}'}" for s, f, a, loss in points), flush=True)
        rows.append({"lr": lr, "final_loss": result.final_loss, "last10_loss": round(tail, 4), "format_0.9_step": summary["format_0.9_step"],
                     "curve": points, "seconds": round(time.time() - started, 1)})
    print(json.dumps({"model": args.model, "task": args.task, "steps": args.steps, "runs": rows}))


if __name__ == "__main__":
    main()
