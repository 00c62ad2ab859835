"""One-off: does a task's stop string cut soft-prompted solutions before their answer line?

Generates a finished soft-prompt run's scored items again with its saved soft prompt, once under the task's
stop strings and once without ``--drop`` (default the blank line), and prints the format_rate, the items right,
the outputs that hit the token limit and the misses' tails under each. The first line must equal the run's own
scored format (a check that the items, prompts and soft prompt are the run's).

    .venv/bin/python benchmarks/stop_strings.py --model smollm2-135m-instruct --task gsm8k --limit 20 --seed 1 \\
        --run runs-claim-a/smollm2-135m-instruct/gsm8k/soft-prompt/seed1
"""

import argparse
import json
from pathlib import Path

from rich.console import Console

from softeval.lm import generation
from softeval.lm.softprompt import SoftPrompt
from softeval.run.config import RunConfig
from softeval.run.pipeline import Job
from softeval.run.scoring import score_output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--task", default="gsm8k")
    parser.add_argument("--limit", type=int, required=True, help="the run's --limit")
    parser.add_argument("--seed", type=int, default=0, help="the run's --seed")
    parser.add_argument("--run", required=True, help="the finished soft-prompt run's folder")
    parser.add_argument("--drop", default="\n\n", help="the stop string to leave out (default: a blank line)")
    parser.add_argument("--batch-size", type=int, default=8, help="generation batch (default 8)")
    args = parser.parse_args()
    cfg = RunConfig(model=args.model, task=args.task, limit=args.limit, seed=args.seed, methods=("soft-prompt",))
    job = Job(cfg, Console())
    job.prepare()
    soft = SoftPrompt.load(Path(args.run) / "soft_prompt", job.lm).weight.detach()
    prompts = [job.prompter.ids(e, "soft-prompt") for e in job.items]
    task = job.task
    for stop in (task.stop, tuple(s for s in task.stop if s != args.drop)):
        gen = generation.generate(job.lm, prompts, soft=soft, max_new_tokens=task.max_new_tokens, stop=stop,
                                  batch_size=args.batch_size)
        scored = [score_output(task, e, o) for e, o in zip(job.items, gen.texts)]
        print(json.dumps({"stop": stop, "format_rate": sum(s["format_ok"] for s in scored) / len(scored),
                          "correct": sum(s["correct"] for s in scored), "hit_limit": sum(gen.hit_limit),
                          "misses": [o[-160:] for o, s in zip(gen.texts, scored) if not s["format_ok"]]}), flush=True)


if __name__ == "__main__":
    main()
