"""Claim (a), the paper's way: does the soft prompt learn each task's format within the step budget?

For every (model, task) it runs zero-shot, few-shot and soft-prompt with `softeval run` (one process each
pair, so a killed script resumes: finished runs are skipped, an interrupted tuning resumes), then prints
one row per pair: the step at which the held-out slice's format_rate first reached 0.90 and that format_rate
at every curve point, the scored items' format_rate and strict accuracy under each method, the causes of the
soft prompt's format misses on the scored items (empty, max_new_tokens, wrong_style ...), and the soft
prompt's paired difference against zero- and few-shot (Tango's interval, McNemar's p, as `softeval compare`
reports it). Where the format did
not saturate, the row says so. The table goes to stdout (markdown) and, with --json-out, to a file.

    .venv/bin/python benchmarks/claim_a.py --limit 50 --out runs-claim-a            # every task, both models
    .venv/bin/python benchmarks/claim_a.py --models smollm2-135m-instruct --tasks gsm8k --limit 20

On 2 AVX2 CPU cores, the two models side by side on one thread each (2026-12-05): 20-40 min per
multiple-choice or short-answer task and model (gemma-3-270m on SQuAD 75 min: 80 steps); SmolLM2 on GSM8K
(20 items, --curve-every 20) 70 min; gemma-3-270m on GSM8K and either model's MATH-500 soft prompt several
hours (whole worked solutions as tuning targets, 256-512 generated tokens per curve item; a MATH step of 8
solutions over a minute). On 2 Intel cores with AVX-512 (2026-12-06), one thread each beside one or two other runs:
a multiple-choice task 3-20 min of tuning per model; MATH-500's soft prompt 51 min (SmolLM2) and 68 min
(gemma-3-270m, --curve-every 40) of tuning.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from softeval.analysis.compare import load_runs
from softeval.analysis.pairs import paired_method_tests
from softeval.metrics import FOLLOWS_FORMAT
from softeval.run.training import still_falling
from softeval.store.format import CURVE_FILE, read_curve

MODELS = ("smollm2-135m-instruct", "gemma-3-270m")
TASKS = ("mmlu", "arc_challenge", "arc_easy", "gsm8k", "math500", "triviaqa", "squad", "hellaswag", "boolq")
METHODS = ("zero-shot", "few-shot", "soft-prompt")


def run_pair(model: str, task: str, args: argparse.Namespace) -> int:
    """One `softeval run` of every method of ``model`` on ``task``; its exit status."""
    softeval = Path(sys.executable).with_name("softeval")
    command = [str(softeval), "run", "--model", model, "--task", task, "--limit", str(args.limit),
               "--method", ",".join(METHODS), "--shots", str(args.shots), "--steps", str(args.steps),
               "--seed", str(args.seed), "--out", args.out, *args.extra]
    print(f"=== {model} {task} ({time.strftime('%H:%M:%S')}): {' '.join(command[1:])}", flush=True)
    return subprocess.run(command).returncode


def rows(out: Path, seed: int) -> list[dict]:
    """One row per (model, task) with the three methods' results and the soft prompt's paired tests."""
    every, _ = load_runs(out)
    runs = [r for r in every if r.seed == seed]
    own = {(r.model, r.task) for r in runs if r.method == "zero-shot"}
    for r in sorted(every, key=lambda r: r.seed):  # a zero-shot run reads no seed: another seed's is this one's
        if r.method == "zero-shot" and (r.model, r.task) not in own:
            runs.append(r)
            own.add((r.model, r.task))
    tests = {(t.task, t.model, t.test.a): t.test for t in paired_method_tests(runs)}
    table: dict[tuple[str, str], dict] = {}
    for r in runs:
        row = table.setdefault((r.model, r.task), {"model": r.model, "task": r.task})
        row[r.method] = {"accuracy": (r.metric("accuracy") or {}).get("value"),
                         "format_rate": (r.metric("format_rate") or {}).get("value"), "n": r.results.get("n"),
                         "failures": r.results.get("format_failures")}
        if r.method == "soft-prompt":
            tuning = r.results.get("tuning") or {}
            row["format_step"] = tuning.get("format_0.9_step")
            row["steps_run"] = tuning.get("steps_run")
            row["loaded_from"] = tuning.get("loaded_from")  # a saved soft prompt scored (softeval eval --soft-prompt)
            points = curve_points(r.path / CURVE_FILE)
            row["curve"] = [(int(p["step"]), p["format_rate"]) for p in points if p.get("format_rate") is not None]
            row["still_falling"] = still_falling(points)  # "" or "; its held-out loss was still falling (...)"
            row["curve_items"] = (r.results.get("config") or {}).get("curve_items")  # 0: no held-out slice
    for (model, task), row in table.items():
        for base in ("zero-shot", "few-shot"):
            test = tests.get((task, model, base))
            row[f"vs {base}"] = test and {"difference": test.difference, "ci": [test.ci_low, test.ci_high],
                                          "p": test.p_value, "n": test.n}
    return [table[k] for k in sorted(table)]


def curve_points(path: Path) -> list[dict]:
    """A tuned run's learning curve (curve.jsonl); [] without a readable one."""
    try:
        return read_curve(path)
    except (OSError, ValueError):
        return []


def _curve(row: dict) -> str:
    return ", ".join(f"{step}: {rate:.2f}" for step, rate in row.get("curve") or []) or "-"


def _cell(result: dict | None) -> str:
    if not result or result.get("accuracy") is None:
        return "-"
    fmt = result.get("format_rate")
    return f"{result['accuracy']:.2f} ({'-' if fmt is None else f'{fmt:.2f}'})"


def _test(test: dict | None) -> str:
    if not test or test.get("difference") is None:
        return "-"
    low, high = test["ci"]
    return f"{test['difference']:+.2f} [{low:+.2f}, {high:+.2f}], p {test['p']:.2g}"


def why_not(row: dict) -> str:
    """The soft prompt's scored items that missed the format, by cause (softeval.diagnosis): where the format did
    not saturate, what the outputs did instead; "-" where every item followed it or nothing was recorded."""
    soft = row.get("soft-prompt") or {}
    failures, n = soft.get("failures") or {}, soft.get("n")
    causes = sorted(((count, cause) for cause, count in (failures.get("causes") or {}).items() if count),
                    key=lambda c: (-c[0], c[1]))
    if not failures.get("failed") or not causes:
        return "-"
    return f"{failures['failed']}/{n}: " + ", ".join(f"{cause.replace('_', ' ')} {count}" for count, cause in causes)


def saturated(row: dict) -> str:
    """Did the format saturate? On the held-out slice during tuning and on the scored items."""
    soft = row.get("soft-prompt")
    if soft is None:
        return "soft prompt not run"
    scored = soft.get("format_rate")
    if row.get("loaded_from"):
        shown = "-" if scored is None else f"{scored:.2f}"
        return f"a saved soft prompt, not tuned in this run; scored items {shown}"
    if row.get("curve_items") == 0:
        shown = "-" if scored is None else f"{scored:.2f}"
        return f"not measured on a held-out slice (--curve-items 0); scored items {shown}"
    if row.get("format_step") is None:
        return (f"no: held-out format_rate never reached {FOLLOWS_FORMAT:.2f} in {row.get('steps_run')} steps"
                + row.get("still_falling", ""))
    if scored is None or scored < FOLLOWS_FORMAT:
        shown = "-" if scored is None else f"{scored:.2f}"
        return f"held-out only (step {row['format_step']}); scored items {shown}"
    return f"yes, step {row['format_step']}"


def markdown(table: list[dict]) -> str:
    lines = ["| model | task | n | zero-shot acc (format) | few-shot acc (format) | soft-prompt acc (format) | "
             "format saturated | held-out format by step | soft prompt's format misses | soft - zero-shot [95%], p | "
             "soft - few-shot [95%], p |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in table:
        n = (row.get("soft-prompt") or row.get("zero-shot") or {}).get("n")
        lines.append(f"| {row['model']} | {row['task']} | {n} | {_cell(row.get('zero-shot'))} | "
                     f"{_cell(row.get('few-shot'))} | {_cell(row.get('soft-prompt'))} | {saturated(row)} | "
                     f"{_curve(row)} | {why_not(row)} | "
                     f"{_test(row.get('vs zero-shot'))} | {_test(row.get('vs few-shot'))} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--limit", type=int, default=50, help="scored items per task (default 50)")
    parser.add_argument("--shots", type=int, default=5)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs-claim-a")
    parser.add_argument("--table-only", action="store_true", help="print the table of the runs already there")
    parser.add_argument("--json-out", help="also write the rows as JSON")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="after --: more `softeval run` options")
    args = parser.parse_args(argv)
    args.extra = [a for a in args.extra if a != "--"]
    failed = []
    if not args.table_only:
        for model in args.models:
            for task in args.tasks:
                if run_pair(model, task, args):
                    failed.append(f"{model} {task}")
    table = rows(Path(args.out), args.seed)
    print(markdown(table))
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(table, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
