"""Does a tuned soft prompt remove the spread of scores across prompt formats? docs/research/prompt-variants.md's grid.

For every (model, task) it runs `softeval run --prompt-variants K` with zero-shot, few-shot and soft-prompt at the
shipped defaults (one process per pair, so a killed script resumes: finished runs are skipped, an interrupted
tuning resumes from its checkpoint), then prints, as markdown, one row per (model, task, method): accuracy and
format_rate across the K variants as mean [min, max] and standard deviation, and the spread tests of the soft prompt
against zero- and few-shot (analysis/spread.py, the same numbers `softeval compare` prints). With --json-out the
rows go to a file too. Its first lines record the host: processor and flags, torch threads.

    .venv/bin/python benchmarks/prompt_variants.py --out runs-variants                        # the whole grid
    .venv/bin/python benchmarks/prompt_variants.py --models smollm2-135m-instruct --tasks arc_easy --limit 100 \\
        --variants 5 --out runs-variants
    .venv/bin/python benchmarks/prompt_variants.py --out runs-variants --table-only            # print, run nothing
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from softeval.analysis.compare import load_runs
from softeval.analysis.spread import spread_tests, spreads
from softeval.lm.precision import cpu_flags

MODELS = ("smollm2-135m-instruct", "gemma-3-270m")
TASKS = ("mmlu", "arc_easy", "squad")
METHODS = ("zero-shot", "few-shot", "soft-prompt")


def run_pair(model: str, task: str, args: argparse.Namespace) -> int:
    """`softeval run --prompt-variants K` of every method of ``model`` on ``task``; its exit status."""
    softeval = Path(sys.executable).with_name("softeval")
    command = [str(softeval), "run", "--model", model, "--task", task, "--method", ",".join(METHODS),
               "--prompt-variants", str(args.variants), "--seed", str(args.seed), "--out", args.out,
               *(["--limit", str(args.limit)] if args.limit else []), *args.extra]
    print(f"=== {model} {task} ({time.strftime('%H:%M:%S')}): {' '.join(command[1:])}", flush=True)
    started = time.time()
    code = subprocess.run(command).returncode
    print(f"=== {model} {task}: exit {code} after {time.time() - started:.0f} s", flush=True)
    return code


def tables(out: Path) -> tuple[str, list[dict]]:
    """The spread table and the tests, as markdown, and the rows as data."""
    runs, skipped = load_runs(out)
    found, tests = spreads(runs), spread_tests(runs)
    lines = ["| model | task | method | K | n | accuracy mean [min, max] | acc. std | format mean [min, max] | "
             "format std |", "|---|---|---|---|---|---|---|---|---|"]
    for s in found:
        lines.append(f"| {s.model} | {s.task} | {s.method} | {len(s.variants)} | {s.n} | "
                     f"{s.accuracy.mean:.3f} [{s.accuracy.low:.3f}, {s.accuracy.high:.3f}] | {_std(s.accuracy.std)} | "
                     f"{s.format_rate.mean:.3f} [{s.format_rate.low:.3f}, {s.format_rate.high:.3f}] | "
                     f"{_std(s.format_rate.std)} |")
    lines += ["", "| model | task | soft prompt vs | std (soft) | std (other) | difference [95% interval] | p | "
              "what it shows |", "|---|---|---|---|---|---|---|---|"]
    for t in tests:
        lines.append(f"| {t.model} | {t.task} | {t.baseline} | {t.std:.3f} | {t.baseline_std:.3f} | "
                     f"{t.difference:+.3f} [{t.low:+.3f}, {t.high:+.3f}] | {t.p:.3f} | {t.sentence} |")
    for path, why in skipped:
        lines.append(f"\nskipped {path}: {why}")
    return "\n".join(lines), [s.row() for s in found] + [t.row() for t in tests]


def _std(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--variants", type=int, default=5, help="prompt variants 0 to K-1 (default 5)")
    parser.add_argument("--limit", type=int, default=None, help="scored items per task (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs-variants")
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--table-only", action="store_true", help="print the tables of what --out holds")
    parser.add_argument("extra", nargs="*", help="more `softeval run` options, after --")
    args = parser.parse_args()
    print(f"host: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; processor flags: "
          f"{' '.join(sorted(f for f in cpu_flags() if f.startswith(('avx', 'amx')))) or 'none of avx/amx'}",
          flush=True)
    failed = []
    if not args.table_only:
        for model in args.models.split(","):
            for task in args.tasks.split(","):
                if run_pair(model, task, args) != 0:
                    failed.append(f"{model} {task}")
    text, rows = tables(Path(args.out))
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1) + "\n")
    if failed:
        print(f"failed: {', '.join(failed)} (run the same command again to resume them)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
