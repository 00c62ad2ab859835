"""Warm start against a fresh start on a trained checkpoint series (issue 16): does a soft prompt started
from the previous checkpoint's reach the same held-out format and loss in fewer steps?

The series is the tests' synthetic one (tests/synthetic_series.py: a tiny Llama pre-trained on a fact
table, checkpoints at steps 100..400), so this runs anywhere in a minute or two on a CPU. Each
configuration is one `softeval track` of the series (soft-prompt only; zero-shot once, for the report);
the figures are read back from the run folders (results.json, curve.jsonl). Tuning seconds come from a
shared machine: compare steps, and read seconds as rough.

    python benchmarks/bench_warm_start.py --out /tmp/warm [--cold-steps 30] [--warm-steps 5,10]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

COMMON = ["--tokens", "4", "--lr", "0.03", "--curve-every", "5", "--curve-items", "8", "--eval-batch-size", "24",
          "--seed", "0"]


def track(folder: Path, task: Path, out: Path, *extra: str) -> None:
    from softeval.cli.app import main

    code = main(["track", str(folder), "--task", str(task), "--out", str(out), *COMMON, *extra])
    if code != 0:
        raise SystemExit(f"softeval track failed ({code}) for {out}")


def summary(out: Path) -> list[dict]:
    rows = []
    for path in sorted(out.glob("*/facts.yaml/soft-prompt/seed0/results.json")):
        r = json.loads(path.read_text())
        curve = [json.loads(line) for line in (path.parent / "curve.jsonl").read_text().splitlines() if line]
        scored = [c for c in curve if c.get("format_rate") is not None]
        rows.append({"step": r["step"], "tune_steps": r["tuning"]["steps_run"], "seconds": r["tuning"]["seconds"],
                     "final_loss": r["tuning"]["final_loss"], "heldout_format": scored[-1]["format_rate"],
                     "heldout_accuracy": scored[-1]["accuracy"],
                     "format_0.9_step": r["tuning"]["format_0.9_step"],
                     "test_format": r["metrics"]["format_rate"]["value"],
                     "test_accuracy": r["metrics"]["accuracy"]["value"],
                     "test_lenient": r["metrics"]["lenient_accuracy"]["value"]})
    return sorted(rows, key=lambda row: row["step"])


def main() -> None:
    import torch
    from synthetic_series import fact_table, train_series, write_task

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cold-steps", type=int, default=30)
    parser.add_argument("--warm-steps", default="5,10")
    args = parser.parse_args()
    torch.set_num_threads(1)
    table = fact_table()
    folder = args.out / "series" / "run"
    if not folder.is_dir():
        train_series(folder, table)
    task = write_task(args.out / "task", table)
    configs = {f"cold{args.cold_steps}": ["--warm-start", "none", "--steps", str(args.cold_steps)]}
    for n in (int(x) for x in args.warm_steps.split(",")):
        configs[f"warm{n}"] = ["--steps", str(args.cold_steps), "--warm-steps", str(n)]
    results = {}
    for name, extra in configs.items():
        methods = "zero-shot,few-shot,soft-prompt" if name.startswith("cold") else "soft-prompt"
        track(folder, task, args.out / name, "--method", methods, *extra)
        results[name] = summary(args.out / name)
    (args.out / "warm_start.json").write_text(json.dumps(results, indent=2))
    keys = ["step", "tune_steps", "seconds", "final_loss", "heldout_format", "test_format", "test_accuracy",
            "test_lenient"]
    print("config      " + "  ".join(f"{k:>14}" for k in keys))
    for name, rows in results.items():
        for row in rows:
            print(f"{name:<11} " + "  ".join(f"{row[k]:>14.3f}" if isinstance(row[k], float) else f"{row[k]!s:>14}"
                                              for k in keys))
        total = sum(r["tune_steps"] for r in rows), sum(r["seconds"] for r in rows)
        print(f"{name:<11} total tuning steps {total[0]}, seconds {total[1]:.1f}")


if __name__ == "__main__":
    main()
