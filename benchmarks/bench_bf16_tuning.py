"""bf16 against fp32 tuning (``--tune-dtype``, lm/precision.py): step time side by side, the matmul peak of both
dtypes at the tuning shape, and (``--score``) the tuned soft prompt's scores paired item by item.

Step time: per model and task, the same seeded batches of the task's real tuning prompts (as a run builds them:
its Job and Prompter), one fp32 step and one bf16 step on the bf16 copy of the frozen weights, interleaved and
alternating which goes first, each side with its own fp32 soft prompt and AdamW. On a shared machine only these
side-by-side ratios mean something; the absolute times move with the other jobs.

Scores (``--score``): a soft-prompt run per tuning dtype and seed (``run_job``, the CLI's path), then per seed the
paired differences of accuracy and format_rate and the share of identical outputs.

    PYTHONPATH=src python benchmarks/bench_bf16_tuning.py --models smollm2-135m-instruct gemma-3-270m \\
        --tasks squad mmlu gsm8k --steps 4 --json-out bench_bf16.json
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from perf import Shape, tuning_step_flops  # noqa: E402  (benchmarks/perf.py, beside this script)
from rich.console import Console  # noqa: E402

from softeval.lm import precision, tuning_loss  # noqa: E402
from softeval.lm.models import load_model  # noqa: E402
from softeval.run.config import RunConfig  # noqa: E402
from softeval.run.pipeline import Job, run_job  # noqa: E402
from softeval.run.tuning_loop import batches  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def matmul_rates(m: int, k: int, n: int, rounds: int = 3, reps: int = 5, device: str = "cpu") -> dict[str, list[float]]:
    """GFLOP/s of an (m x k) @ (k x n) product in fp32 and bf16, interleaved ``rounds`` times (best of ``reps``)."""
    out: dict[str, list[float]] = {name: [] for name in DTYPES}
    for _ in range(rounds):
        for name, dtype in DTYPES.items():
            a, b = torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, n, dtype=dtype, device=device)
            torch.matmul(a, b)
            best = float("inf")
            for _ in range(reps):
                _sync(device)
                t0 = time.perf_counter()
                torch.matmul(a, b)
                _sync(device)
                best = min(best, time.perf_counter() - t0)
            out[name].append(round(2.0 * m * k * n / best / 1e9, 1))
    return out


def step_times(lm, job: Job, steps: int, batch_size: int, seed: int) -> dict:
    """fp32 and bf16 tuning steps on the same batches, interleaved; seconds per step of each side."""
    copies = {"float32": lm, "bfloat16": precision.tuning_model(lm, torch.bfloat16)}
    plan = batches(len(job.train), batch_size, steps + 1, seed)
    pairs = {i: (job.prompter.ids(job.train[i], "soft-prompt"), job.prompter.target_ids(job.train[i]))
             for b in plan for i in b}
    init = lm.model.get_input_embeddings().weight[:10].detach().float().clone()
    device = str(init.device)
    sides = {}
    for name in copies:
        soft = torch.nn.Parameter(init.clone())
        sides[name] = (soft, torch.optim.AdamW([soft], lr=3e-2))

    def step(name: str, batch: list[int]) -> float:
        soft, opt = sides[name]
        opt.zero_grad(set_to_none=True)
        _sync(device)
        t0 = time.perf_counter()
        tuning_loss.target_loss_backward(copies[name], [pairs[i][0] for i in batch], [pairs[i][1] for i in batch],
                                         soft)
        opt.step()
        _sync(device)
        return time.perf_counter() - t0

    for name in copies:  # warm-up (oneDNN primitives, the head check of each copy)
        step(name, plan[-1])
    times: dict[str, list[float]] = {name: [] for name in copies}
    for k, batch in enumerate(plan[:steps]):
        order = list(copies) if k % 2 == 0 else list(copies)[::-1]
        for name in order:
            times[name].append(step(name, batch))
    ratios = [f / b for f, b in zip(times["float32"], times["bfloat16"])]
    shape = Shape.of(lm.model.config)
    flops = [tuning_step_flops(shape, [(len(pairs[i][0]) + len(pairs[i][1]) + 10, len(pairs[i][1])) for i in b])
             for b in plan[:steps]]
    tokens = [sum(len(pairs[i][0]) + len(pairs[i][1]) for i in b) for b in plan[:steps]]
    return {"seconds": {k: [round(t, 3) for t in v] for k, v in times.items()},
            "median_seconds": {k: round(statistics.median(v), 3) for k, v in times.items()},
            "speedup_bf16": round(statistics.median(ratios), 2), "speedup_range": [round(min(ratios), 2),
                                                                                    round(max(ratios), 2)],
            "tokens_per_step": round(statistics.mean(tokens)),
            "achieved_gflops": {k: round(sum(flops) / sum(v) / 1e9, 1) for k, v in times.items()}}


def paired_scores(model: str, task: str, args: argparse.Namespace, out: Path) -> list[dict]:
    """A soft-prompt run per tuning dtype and seed (``args``: the script's --seeds, --limit, --score-steps,
    --batch-size, --curve-items, --device and --eval-batch-size); per seed, the bf16 run against the fp32 one."""
    rows = []
    for seed in args.seeds:
        got = {}
        for name in DTYPES:
            cfg = RunConfig(model=model, task=task, methods=("soft-prompt",), limit=args.limit, steps=args.score_steps,
                            batch_size=args.batch_size, curve_items=args.curve_items, seed=seed, tune_dtype=name,
                            device=args.device, dtype="float32", eval_batch_size=args.eval_batch_size,
                            out=str(out / name))
            result = run_job(cfg, console=Console(file=io.StringIO()))[0]
            folder = out / name / model.replace("/", "--") / task / "soft-prompt" / f"seed{seed}"
            samples = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
            got[name] = (result, samples)
        s32, s16 = got["float32"][1], got["bfloat16"][1]
        metric = {name: {m: got[name][0]["metrics"][m]["value"] for m in ("accuracy", "format_rate")}
                  for name in DTYPES}
        rows.append({"model": model, "task": task, "seed": seed, **{f"{m}_{n}": metric[n][m] for n in DTYPES
                                                                   for m in ("accuracy", "format_rate")},
                     "accuracy_diff": round(metric["bfloat16"]["accuracy"] - metric["float32"]["accuracy"], 4),
                     "format_diff": round(metric["bfloat16"]["format_rate"] - metric["float32"]["format_rate"], 4),
                     "same_outputs": round(sum(a["output"] == b["output"] for a, b in zip(s32, s16)) / len(s32), 3),
                     "tune_seconds": {n: got[n][0]["tuning"]["seconds"] for n in DTYPES},
                     "final_loss": {n: got[n][0]["tuning"]["final_loss"] for n in DTYPES},
                     "ran": {n: got[n][0]["tuning"]["tune_dtype_ran"] for n in DTYPES}})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2-135m-instruct", "gemma-3-270m"])
    parser.add_argument("--tasks", nargs="+", default=["squad", "mmlu", "gsm8k"])
    parser.add_argument("--steps", type=int, default=4, help="timed steps per dtype")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--score", action="store_true", help="also the paired soft-prompt runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--score-steps", type=int, default=20)
    parser.add_argument("--curve-items", type=int, default=8)
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda: where the model runs; scoring in fp32")
    parser.add_argument("--eval-batch-size", type=int, default=16, help="scoring batch of the paired runs")
    parser.add_argument("--json-out")
    args = parser.parse_args(argv)
    result = {"threads": torch.get_num_threads(), "cpu_bf16": precision.native_bf16(torch.device("cpu")),
              "cpu_flags": sorted(precision.cpu_flags() & {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}),
              "cpu_capability": torch.backends.cpu.get_cpu_capability(), "device": args.device,
              "cuda": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
              "cuda_bf16": precision.native_bf16(torch.device(args.device)) if args.device.startswith("cuda") else None,
              "steps": [], "scores": []}
    for model in args.models:
        lm = load_model(model, device=args.device, dtype="float32")
        cfg = getattr(lm.model.config, "text_config", lm.model.config)
        m = 1536
        result.setdefault("matmul_gflops", {})[f"{m}x{cfg.hidden_size}x{cfg.intermediate_size}"] = matmul_rates(
            m, cfg.hidden_size, cfg.intermediate_size, device=args.device)
        print(json.dumps(result["matmul_gflops"]), flush=True)
        for task in args.tasks:
            job = Job(RunConfig(model=model, task=task, methods=("soft-prompt",), batch_size=args.batch_size),
                      Console(file=io.StringIO()), _lm=lm)
            job.prepare()
            row = {"model": model, "task": task, **step_times(lm, job, args.steps, args.batch_size, 0)}
            result["steps"].append(row)
            print(json.dumps(row), flush=True)
        del lm
        if args.score:
            with tempfile.TemporaryDirectory() as out:
                for task in args.tasks:
                    result["scores"] += paired_scores(model, task, args, Path(out))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
