"""softeval vs lm-evaluation-harness (HF backend) and a plain PEFT prompt-tuning loop, side by side.

Not a test. Both sides run in this one process on the same loaded model object, the same items,
prompts (token-identical strings), batch size, stop rules and max_new_tokens, with the same
``torch.set_num_threads``; timed calls are interleaved (softeval, baseline, alternating order
between sections) after one warm-up call of each side, ``rounds`` times (A/B, B/A, A/B, ...): each
ratio is reported as the median over the rounds with its min-max. Prints a table and, as the last
line, JSON.

    make bench-quick     # or: .venv/bin/python benchmarks/bench_speed.py --quick   (1 round, ~7 min)
    make bench           # or: .venv/bin/python benchmarks/bench_speed.py           (3 rounds + ablations)

What is timed: softeval = tokenizing the prompts + ``generation.generate`` / ``loglik.option_logprobs``;
lm-eval = ``HFLM.generate_until`` / ``HFLM.loglikelihood`` on the instances its task built from a
task YAML (written to a temp dir, reading the same items from a local JSONL), i.e. lm-eval's own
tokenization and batching but not its task set-up or metric code (which favours lm-eval). Tuning:
softeval = ``tuning_loss.target_loss_backward`` + AdamW (the body of ``softeval.run.tuning_loop.tune``); PEFT =
``get_peft_model(model, PromptTuningConfig(...))`` with right-padded inputs and ``labels`` (-100 on
prompt and pads, full-vocabulary logits and cross-entropy), same batches, same 10 virtual tokens; both on the
weights ``softeval run`` tunes on (``--tune-dtype auto``: the model as loaded, in the run's dtype),
and ``tune_mfu`` is against the matmul peak of that dtype.

The tuning, generation and log-likelihood sections and the timing they share are in ``bench_speed_peers.py``
beside this script; this one holds the modes, the targets, the ablations, the run and its report.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TQDM_DISABLE", "1")  # lm-eval's and datasets' per-call bars would bury the rows
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

import torch
from bench_speed_peers import (  # benchmarks/bench_speed_peers.py, beside this script
    Items,
    LmEvalSide,
    Timing,
    TuneSection,
    bench_generation,
    bench_loglik,
    bench_tuning,
    interleave,
    round_ratios,
    spread,
)

from softeval.lm import batching, generation, kv_cache, skinny
from softeval.lm.models import load_model
from softeval.run.prompting import Prompter, pick_shots, use_chat_template
from softeval.tasks import get_task
from softeval.tasks.data import seeded_subset

MODES = {
    # One rule for both modes: the same sections, items, item counts per call, seeded plans and
    # max_new_tokens; the quick mode is the full mode's first round without the ablations. Item
    # counts per call matter: the few-shot block is computed once per call, so softeval's few-shot
    # advantage grows with the items per call (a real run calls with up to 64); a quick mode with
    # fewer items per call measured a different ratio (BENCHMARKS.md, "One rule for both modes").
    "quick": {"mmlu": 24, "gsm8k": 8, "loglik": 24, "tune_steps": 4, "group_window": 4, "rounds": 1,
              "tune_ablations": False, "ablation": ()},
    # full: 3 interleaved rounds (each ratio with its min-max) and the ablations; ~20 min quiet
    "full": {"mmlu": 24, "gsm8k": 8, "loglik": 24, "tune_steps": 4, "group_window": 4, "rounds": 3,
             "tune_ablations": True, "ablation_items": 8,
             "ablation": (("mmlu", "zero-shot"), ("mmlu", "few-shot"), ("gsm8k", "few-shot"))},
}


# The targets the speed benchmark is held to (full mode, quiet machine): BENCHMARKS.md's "target" column.
TARGETS = {"tune_speedup_vs_peft": 2.5, "zeroshot_speedup_vs_lmeval": 1.5, "fewshot_speedup_vs_lmeval": 3,
           "loglik_speedup_vs_lmeval": 2, "output_agreement": 0.98, "tune_mfu": 0.6}


class Rows(list):
    """Table rows, also logged to stderr as they come (a long run shows its figures early)."""

    def append(self, row):
        log("  " + " | ".join(row))
        super().append(row)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---- ablations: softeval's speed paths on and off --------------------------------------------

def _ablation(rows: list, label: str, on, off, rounds: int, detail: str) -> float:
    """Time a speed path on and off (interleaved), record the row, return the gain (off / on)."""
    (a, b), (t_on, t_off) = interleave(rounds, on, off, False)
    t_on, t_off = sum(t_on), sum(t_off)
    rows.append((label, f"{t_off / t_on:.2f}x", f"{detail}; identical {sum(x == y for x, y in zip(a, b))}/{len(a)}"))
    return t_off / t_on


def ablation_prefix(lm, what: Items, batch_size: int, rows) -> float:
    """softeval with and without the shared-prefix cache (is the cache worth keeping?)."""
    task, method = what.task, what.method
    seqs = [what.prompter.ids(e, method) for e in what.items]
    kw = {"max_new_tokens": task.max_new_tokens, "stop": task.stop, "batch_size": batch_size}
    return _ablation(rows, f"ablation {task.name} {method}: prefix cache on/off",
                     lambda: generation.generate(lm, seqs, prefix_cache=None, **kw).texts,
                     lambda: generation.generate(lm, seqs, prefix_cache=False, **kw).texts, 1,
                     f"shared {batching.common_prefix_len(seqs)} of ~{sum(map(len, seqs)) // len(seqs)} tokens")


def ablation_switch(switch: tuple, lm, what: Items, batch_size: int, rows) -> float:
    """softeval's generation with a speed path's module flag on and off (``switch``: the module, the flag's name
    and what it does; ``kv_cache.GROWING_CACHE``: its in-place growing KV cache vs transformers' DynamicCache;
    ``skinny.ENABLED``: few-row linears as W @ x^T vs F.linear)."""
    owner, flag, label = switch
    task, method = what.task, what.method
    seqs = [what.prompter.ids(e, method) for e in what.items]
    kw = {"max_new_tokens": task.max_new_tokens, "stop": task.stop, "batch_size": batch_size}

    default = getattr(owner, flag)

    def run(on: bool):
        setattr(owner, flag, on)
        try:
            return generation.generate(lm, seqs, **kw).texts
        finally:
            setattr(owner, flag, default)

    return _ablation(rows, f"ablation {task.name} {method}: {label}", lambda: run(True), lambda: run(False), 2,
                     f"{len(seqs)} items, max_new_tokens {kw['max_new_tokens']}")


def arguments(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the full mode's first round, no ablations (MODES)")
    ap.add_argument("--rounds", type=int, default=0, help="interleaved rounds per section (default: the mode's)")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--shots", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=10, help="soft prompt length for the tuning section")
    ap.add_argument("--skip", default="", help="comma list of sections to skip: tune,generate,loglik,ablation")
    ap.add_argument("--json-out", default=None, help="also write the JSON to this file")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = arguments(argv)
    mode = "quick" if args.quick else "full"
    cfg = dict(MODES[mode])
    cfg["rounds"] = args.rounds or cfg["rounds"]
    skip = set(filter(None, args.skip.split(",")))
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    run = SpeedRun(args, cfg, mode)
    if "tune" not in skip:
        run.tuning()
    else:
        run.result["peak_rss_gib"] = None
    with tempfile.TemporaryDirectory(prefix="softeval-bench-") as tmp:
        side = LmEvalSide(run.lm, args.batch_size, Path(tmp))
        if "generate" not in skip:
            run.generation(side)
        if "loglik" not in skip:
            run.loglik(side)
    if "ablation" not in skip and cfg["ablation"]:  # the ablations are in the full mode only
        run.ablations()
    run.result["seconds"] = round(time.time() - run.started, 1)
    run.result["machine"] = f"{platform.machine()} {platform.processor() or ''} cpus={os.cpu_count()} " \
                            f"torch={torch.__version__} threads={args.threads}".strip()
    report(run.rows, run.result, args.json_out)
    return 0


class SpeedRun:
    """One run of the benchmark: the model, the two tasks with their prompters and items, the table's rows and the
    JSON ``result``, in the mode ``cfg``; a method per section."""

    def __init__(self, args: argparse.Namespace, cfg: dict, mode: str) -> None:
        self.args, self.cfg = args, cfg
        self.started = time.time()
        self.rows: list[tuple[str, str, str]] = Rows()
        self.result: dict = {"mode": mode, "model": args.model, "batch_size": args.batch_size,
                             "threads": args.threads, "rounds": cfg["rounds"], "spread": {}}
        self.timing = Timing(args.batch_size, cfg["rounds"], self.rows)
        lm = self.lm = load_model(args.model, device=args.device, dtype=args.dtype)
        self.result.update(device=str(lm.device), dtype=str(next(lm.model.parameters()).dtype).replace("torch.", ""))
        log(f"loaded {args.model} on {lm.device} in {lm.load_seconds:.1f}s")
        chat = use_chat_template(lm, "auto")
        self.tasks = {name: get_task(name) for name in ("mmlu", "gsm8k")}
        self.splits = {name: t.load("offline") for name, t in self.tasks.items()}
        self.prompters = {name: Prompter(lm, self.tasks[name], chat, pick_shots(self.splits[name].tune, args.shots, 0))
                          for name in self.tasks}
        self.items = {"mmlu": seeded_subset(self.splits["mmlu"].eval, cfg["mmlu"], 0),
                      "gsm8k": seeded_subset(self.splits["gsm8k"].eval, cfg["gsm8k"], 0)}

    def since(self) -> str:
        return f"({time.time() - self.started:.0f}s)"

    def section(self, name: str, method: str, items=None) -> Items:
        """The items of task ``name`` for ``method`` (``items``: others than the generation sections')."""
        return Items(self.tasks[name], self.prompters[name], self.items[name] if items is None else items, method)

    def tuning(self) -> None:
        log(f"tuning: softeval vs PEFT {self.since()}")
        train = self.splits["mmlu"].tune
        self.result["tune_items"] = len(train)
        bench_tuning(self.lm, self.prompters["mmlu"], train, self.timing, self.result,
                     TuneSection(self.cfg["tune_steps"], self.args.tokens, self.cfg["group_window"],
                                 self.cfg["tune_ablations"]))

    def generation(self, side: LmEvalSide) -> None:
        result, gen = self.result, {}
        flip = False
        for name in ("mmlu", "gsm8k"):
            for method in ("zero-shot", "few-shot"):
                log(f"generate: {name} {method} {self.since()}")
                gen[(name, method)] = bench_generation(self.lm, side, self.section(name, method), self.timing, flip)
                flip = not flip
        for method, key in (("zero-shot", "zeroshot"), ("few-shot", "fewshot")):
            for suffix, names in (("", ("mmlu", "gsm8k")), ("_mmlu", ("mmlu",)), ("_gsm8k", ("gsm8k",))):
                ratios = spread(round_ratios([gen[(n, method)] for n in names]))
                result[f"{key}_speedup_vs_lmeval{suffix}"] = ratios["median"]
                result["spread"][f"{key}_speedup_vs_lmeval{suffix}"] = ratios
        all_parts = list(gen.values())
        n_items = sum(p["n"] for p in all_parts)
        result["output_agreement"] = round(sum(p["same"] for p in all_parts) / n_items, 4)
        for who in ("softeval", "lmeval"):
            result[f"accuracy_{who}"] = {f"{n}/{m}": round(p[f"correct_{who}"] / p["n"], 4)
                                          for (n, m), p in gen.items()}
        result["mismatch_examples"] = {f"{n}/{m}": p["mismatch_examples"] for (n, m), p in gen.items()
                                       if p["mismatch_examples"]}

    def loglik(self, side: LmEvalSide) -> None:
        result, ll = self.result, {}
        ll_items = seeded_subset(self.splits["mmlu"].eval, self.cfg["loglik"], 0)
        for k, method in enumerate(("zero-shot", "few-shot")):
            log(f"loglik: mmlu {method} {self.since()}")
            ll[method] = bench_loglik(self.lm, side, self.section("mmlu", method, ll_items), self.timing, bool(k))
        for suffix, parts in (("", list(ll.values())), *((f"_{m}", [p]) for m, p in ll.items())):
            ratios = spread(round_ratios(parts))
            result[f"loglik_speedup_vs_lmeval{suffix}"] = ratios["median"]
            result["spread"][f"loglik_speedup_vs_lmeval{suffix}"] = ratios
        result["loglik_accuracy_softeval"] = {m: round(p["acc_softeval"], 4) for m, p in ll.items()}
        result["loglik_accuracy_lmeval"] = {m: round(p["acc_lmeval"], 4) for m, p in ll.items()}
        result["loglik_same_argmax"] = round(sum(p["same_pick"] for p in ll.values())
                                             / sum(p["n"] for p in ll.values()), 4)

    def ablations(self) -> None:
        cfg, batch_size = self.cfg, self.args.batch_size
        log(f"ablation: prefix cache {self.since()}")
        self.result["prefix_cache_gain"] = {
            f"{name}/{method}": round(ablation_prefix(
                self.lm, self.section(name, method, self.items[name][:cfg["ablation_items"]]), batch_size,
                self.rows), 3)
            for name, method in cfg["ablation"]}
        for key, owner, flag, what in (
                ("growing_cache_gain", kv_cache, "GROWING_CACHE", "growing cache vs DynamicCache"),
                ("skinny_linear_gain", skinny, "ENABLED", "W @ x^T vs F.linear on few rows")):
            log(f"ablation: {what} {self.since()}")
            gsm8k = self.section("gsm8k", "zero-shot", self.items["gsm8k"][:cfg["ablation_items"]])
            self.result[key] = round(ablation_switch((owner, flag, what), self.lm, gsm8k, batch_size, self.rows), 3)


def report(rows: list, result: dict, json_out: str | None) -> None:
    """The table, each target met or missed, then the JSON line (also written to ``json_out``)."""
    width = max(len(r[0]) for r in rows) if rows else 10
    print(f"{'what':<{width}}  {'speed':>16}  notes")
    for what, speed, note in rows:
        print(f"{what:<{width}}  {speed:>16}  {note}")
    for key, goal in TARGETS.items():
        if result.get(key) is not None:
            s = result["spread"].get(key)
            span = f" (median of {len(s['rounds'])} rounds, min {s['min']}, max {s['max']})" if s else ""
            print(f"target {key} >= {goal}: {result[key]}{span} {'met' if result[key] >= goal else 'MISSED'}")
    if result.get("peak_rss_gib") is not None:
        rss = result["peak_rss_gib"]
        print(f"target peak_rss_gib <= 3: {rss} {'met' if rss <= 3 else 'MISSED'}")
    line = json.dumps(result, sort_keys=True)
    if json_out:
        Path(json_out).write_text(line + "\n")
    print(line)


if __name__ == "__main__":
    raise SystemExit(main())
