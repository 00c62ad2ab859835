"""How fast the command line starts (issue 62, "A CLI that starts at once"): `softeval --help`, each
`softeval <cmd> --help`, and `softeval runs` over an output root of N finished runs, each timed as the median
wall time of several runs of the command, each in a fresh process, as a user types it.

The runs are written by the store's own code (``store.runs.RunFolder.finish``, the record of
``store.schema.ResultsRecord``, the metrics of ``metrics.aggregate``), so every reader takes them as finished runs:
N/5 models, each with a zero-shot, a few-shot and three soft-prompt seeds on MMLU-shaped items (the soft
prompt a stand-in file: `runs` never reads it). The script checks that `softeval runs --json` lists all N.

With ``--baseline-src DIR`` every command is timed a second time with ``PYTHONPATH=DIR`` (the src/ folder of
another checkout, e.g. a worktree of an older commit), in the same call, alternating the two trees, so before
and after are measured on one host under the same load:

    git worktree add /tmp/base 5c00247
    python benchmarks/bench_cli_start.py --baseline-src /tmp/base/src --json-out bench_cli.json
    git worktree remove /tmp/base
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
MAIN = "import sys; from softeval.cli import main; sys.exit(main())"  # what the `softeval` script runs
FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")  # the processor flags softeval's speed follows
PER_MODEL = (("zero-shot", 0), ("few-shot", 0), ("soft-prompt", 0), ("soft-prompt", 1), ("soft-prompt", 2))
ITEMS = 40


def host() -> dict:
    """The processor, its flags of interest, the cores, the load and Python: what the figures depend on."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    lines = info.splitlines()
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                platform.processor() or platform.machine())
    from softeval.lm.precision import cpu_flags  # the one reader of the processor's flags

    flags = cpu_flags()
    return {"processor": name, "flags": [f for f in FLAGS if f in flags], "cores": os.cpu_count(),
            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
            "python": platform.python_version(), "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}


def _samples(model: int, seed: int) -> list[dict]:
    """A run's scored items: four-option answers, about 60% correct, a few off the format."""
    rows = []
    for i in range(ITEMS):
        gold = "ABCD"[i % 4]
        format_ok = (i + model + seed) % 9 != 0
        correct = format_ok and (i * 7 + model + seed) % 5 < 3
        strict = (gold if correct else "ABCD"[(i + 1) % 4]) if format_ok else None
        rows.append({"id": f"mmlu/test/{i}", "prompt": f"Question {i}?\nA. a\nB. b\nC. c\nD. d\nAnswer:",
                     "output": f" {strict}" if strict else " I think it is B.", "strict": strict,
                     "lenient": strict or "B", "gold": gold, "format_ok": format_ok, "correct": correct,
                     "lenient_correct": correct or (not format_ok and gold == "B"),
                     "failure": None if format_ok else "wrong_style", "hit_max_new_tokens": False})
    return rows


def _write_run(out: Path, model: str, method: str, seed: int, samples: list[dict]) -> Path:
    """One finished run, written as `softeval run` writes one (the partial folder, then renamed into place and
    added to the index)."""
    from softeval.constants import ADAPTER_WEIGHTS
    from softeval.diagnosis import count_causes
    from softeval.methods import spec_of
    from softeval.metrics import aggregate, answer_counts
    from softeval.store.format import samples_digest
    from softeval.store.runs import RunFolder, jsonl_text, now, versions
    from softeval.store.schema import ResultsRecord

    text = jsonl_text(samples)
    folder = RunFolder.at(out, model, "mmlu", method, seed)
    partial = folder.start()
    spec = spec_of(method)
    if spec.folder is not None:  # a tuned run holds what it trained; `runs` never reads it
        (partial / spec.folder).mkdir(exist_ok=True)
        (partial / spec.folder / ADAPTER_WEIGHTS).write_bytes(b"stand-in")
    results = ResultsRecord(
        softeval_version=versions()["softeval"], model=model, model_kind="base", model_kind_source="preset",
        task="mmlu", method=method, seed=seed, n=len(samples), series=None, step=None, metrics=aggregate(samples),
        answers=answer_counts(samples), format_failures=count_causes(samples),
        item_ids=[s["id"] for s in samples],
        split={"tune": "dev", "eval": "test", "held_out": False, "seed": 1234, "note": "synthetic"},
        chat_template=False, engine={"backend": "hf"}, truncated_prompts=0, unscorable=0,
        tuning={"steps": 80, "lr": 0.03} if spec.tunes else None, config={"model": model, "task": "mmlu"},
        versions=versions(), git=None, started_at=now(), finished_at=now(), wall_seconds=1.0,
        **samples_digest(text))
    return folder.finish(results.as_json(), text)


def write_runs(out: Path, n: int) -> list[Path]:
    """``n`` finished runs under ``out``: ``n // 5`` models (and the rest) by PER_MODEL's methods and seeds."""
    written = []
    for k in range(n):
        method, seed = PER_MODEL[k % len(PER_MODEL)]
        model = k // len(PER_MODEL)
        written.append(_write_run(out, f"bench-model-{model}", method, seed, _samples(model, seed)))
    return written


def commands() -> list[list[str]]:
    """The timed commands' arguments: --help, each command's --help, and `runs` (its folder filled in later)."""
    sys.path.insert(0, str(SRC))
    from softeval.cli.app import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [["--help"], *[[name, "--help"] for name in sub.choices], ["runs", "{runs}"]]


def _once(args: list[str], src: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "120"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", MAIN, *args], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"`softeval {' '.join(args)}` with PYTHONPATH={src} exited {done.returncode}: "
                         f"{done.stderr.strip()[-500:]}")
    return seconds


def listed(src: Path, runs: Path) -> int:
    """How many runs `softeval runs --json` lists from ``src``'s code."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", MAIN, "runs", str(runs), "--json"], env=env,
                          capture_output=True, text=True, check=True)
    return len(json.loads(done.stdout))


def time_all(trees: dict[str, Path], argvs: list[list[str]], repeats: int) -> dict[str, dict[str, list[float]]]:
    """Each command's wall times per tree: one untimed run first (bytecode written), then ``repeats`` timed,
    the trees alternating so a change of load falls on both."""
    times: dict[str, dict[str, list[float]]] = {label: {} for label in trees}
    for args in argvs:
        shown = " ".join(args)
        for label, src in trees.items():
            _once(args, src)
            times[label][shown] = []
        for _ in range(repeats):
            for label, src in trees.items():
                times[label][shown].append(_once(args, src))
    return times


def table(times: dict[str, dict[str, list[float]]], about: dict, n_runs: int) -> str:
    """The figures as a Markdown table: each command's median (and fastest) per tree, and the ratio."""
    labels = list(times)
    head = "| command | " + " | ".join(f"{label}: median (min), s" for label in labels)
    head += " | before / after |" if len(labels) == 2 else " |"
    lines = [f"{about['processor']}, {about['cores']} cores, flags {' '.join(about['flags']) or 'none of '}"
             f"{'' if about['flags'] else ', '.join(FLAGS)}; Python {about['python']}; {about['date']}; "
             f"load average at start {about['load_average']}; `runs` over {n_runs} runs", "",
             head, "|---" * (len(labels) + 1 + (len(labels) == 2)) + "|"]
    for shown in times[labels[0]]:
        cells = [f"{statistics.median(times[label][shown]):.3f} ({min(times[label][shown]):.3f})"
                 for label in labels]
        ratio = ""
        if len(labels) == 2:
            ratio = f" {statistics.median(times[labels[1]][shown]) / statistics.median(times[labels[0]][shown]):.1f}x |"
        lines.append(f"| `softeval {shown.replace(' {runs}', ' RUNS')}` | " + " | ".join(cells) + " |" + ratio)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=7, help="timed runs of each command per tree (default 7)")
    p.add_argument("--runs", type=int, default=50, help="finished runs for `softeval runs` (default 50)")
    p.add_argument("--baseline-src", type=Path, default=None, metavar="DIR",
                   help="another checkout's src/ folder, timed beside this one (PYTHONPATH=DIR)")
    p.add_argument("--only", nargs="*", default=None, metavar="CMD", help="time only these commands (e.g. runs)")
    p.add_argument("--json-out", type=Path, default=None)
    args = p.parse_args(argv)
    trees = {"after": SRC} if args.baseline_src is None else {"after": SRC, "before": args.baseline_src.resolve()}
    about = host()
    with tempfile.TemporaryDirectory(prefix="bench_cli_") as tmp:
        runs = Path(tmp) / "runs"
        sys.path.insert(0, str(SRC))
        write_runs(runs, args.runs)
        for label, src in trees.items():
            found = listed(src, runs)
            if found != args.runs:
                raise SystemExit(f"`softeval runs` ({label}) lists {found} of the {args.runs} runs written")
        argvs = [[a.format(runs=runs) for a in argv] for argv in commands()
                 if args.only is None or argv[0] in args.only or argv[0].lstrip("-") in args.only]
        times = time_all(trees, argvs, args.repeats)
    times = {label: {shown.replace(str(runs), "{runs}"): t for shown, t in by.items()} for label, by in times.items()}
    print(table(times, about, args.runs))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps({"host": about, "runs": args.runs, "repeats": args.repeats,
                                             "seconds": times}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
