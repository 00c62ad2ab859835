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
softeval = ``tuning_loss.target_loss_backward`` + AdamW (the body of ``softeval.run.tune.tune``); PEFT =
``get_peft_model(model, PromptTuningConfig(...))`` with right-padded inputs and ``labels`` (-100 on
prompt and pads, full-vocabulary logits and cross-entropy), same batches, same 10 virtual tokens.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import platform
import resource
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
from perf import Shape, matmul_peak, tuning_step_flops  # benchmarks/perf.py, beside this script

from softeval.lm import batching, generation, kv_cache, loglik, memory, skinny, tuning_loss
from softeval.lm.models import load_model
from softeval.lm.softprompt import SoftPrompt
from softeval.run.prompting import Prompter, pick_shots, use_chat_template
from softeval.run.scoring import score_output
from softeval.run.tune import batches as tune_batches
from softeval.run.tune import length_grouped
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


# issue 15's targets (full mode, quiet machine)
TARGETS = {"tune_speedup_vs_peft": 2.5, "zeroshot_speedup_vs_lmeval": 1.5, "fewshot_speedup_vs_lmeval": 3,
           "loglik_speedup_vs_lmeval": 2, "output_agreement": 0.98, "tune_mfu": 0.6}


def rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux


class Rows(list):
    """Table rows, also logged to stderr as they come (a long run shows its figures early)."""

    def append(self, row):
        log("  " + " | ".join(row))
        super().append(row)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---- lm-eval side ----------------------------------------------------------------------------

class LmEvalSide:
    def __init__(self, lm, batch_size: int, folder: Path):
        from lm_eval.models.huggingface import HFLM

        for name in ("lm_eval", "lm-eval"):  # per-task notices would bury the rows
            logging.getLogger(name).setLevel(logging.ERROR)
        self.folder = folder
        self.hflm = HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=batch_size,
                         device=str(lm.device), max_length=lm.max_length)
        self.n = 0

    def task_instances(self, docs: list[dict], kind: str, until=None, max_gen_toks=None):
        """Write docs to JSONL + a task YAML, load it with lm-eval's TaskManager, build requests."""
        from lm_eval.tasks import TaskManager, get_task_dict

        self.n += 1
        name = f"softeval_bench_{self.n}"
        data = self.folder / f"{name}.jsonl"
        data.write_text("".join(json.dumps(d) + "\n" for d in docs))
        lines = [f"task: {name}", "dataset_path: json", "dataset_kwargs:", "  data_files:",
                 f"    test: {json.dumps(str(data))}", "test_split: test", "doc_to_text: prompt"]
        if kind == "generate_until":
            lines += ["output_type: generate_until", "doc_to_target: gold", "generation_kwargs:",
                      f"  until: {json.dumps(list(until))}", f"  max_gen_toks: {max_gen_toks}",
                      "  do_sample: false", "metric_list:", "  - metric: exact_match"]
        else:
            lines += ["output_type: multiple_choice", "doc_to_choice: choices", "doc_to_target: label",
                      'target_delimiter: ""', "metric_list:", "  - metric: acc"]
        (self.folder / f"{name}.yaml").write_text("\n".join(lines) + "\n")
        manager = TaskManager(include_path=str(self.folder), include_defaults=False, verbosity="ERROR")
        task = get_task_dict([name], manager)[name]
        task.build_all_requests(limit=None, rank=0, world_size=1)
        instances = sorted(task.instances, key=lambda r: (r.doc_id, r.idx))
        return instances

    def generate(self, instances) -> list[str]:
        out = self.hflm.generate_until(instances, disable_tqdm=True)
        by_doc = {}
        for inst, text in zip(instances, out):
            by_doc[inst.doc_id] = text
        return [by_doc[i] for i in sorted(by_doc)]

    def loglik(self, instances) -> list[list[float]]:
        out = self.hflm.loglikelihood(instances, disable_tqdm=True)
        scores: dict[int, list[float]] = {}
        for inst, (ll, _greedy) in zip(instances, out):
            scores.setdefault(inst.doc_id, []).append(float(ll))
        return [scores[i] for i in sorted(scores)]


# ---- timing helpers --------------------------------------------------------------------------

def timed(fn):
    gc.collect()
    t0 = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0


def interleave(rounds: int, first, second, flip: bool):
    """Run ``first`` and ``second`` alternately ``rounds`` times (AB, BA, AB, ...); returns the last
    values and the seconds of each side per round."""
    times: list[list[float]] = [[], []]
    values = [None, None]
    fns = [first, second]
    for r in range(rounds):
        order = [0, 1] if (r + flip) % 2 == 0 else [1, 0]
        for k in order:
            values[k], dt = timed(fns[k])
            times[k].append(dt)
    return values, times


def spread(ratios: list[float]) -> dict:
    """Median and min-max of per-round ratios (the quick mode's answer to a noisy machine)."""
    import statistics

    return {"median": round(statistics.median(ratios), 3), "min": round(min(ratios), 3),
            "max": round(max(ratios), 3), "rounds": [round(r, 3) for r in ratios]}


def round_ratios(parts: list[dict]) -> list[float]:
    """Per round: baseline seconds / softeval seconds, summed over ``parts`` (sections)."""
    rounds = len(parts[0]["t_softeval"])
    return [sum(p["t_lmeval"][r] for p in parts) / sum(p["t_softeval"][r] for p in parts) for r in range(rounds)]


# ---- sections --------------------------------------------------------------------------------

def bench_tuning(lm, prompter, train, steps: int, batch_size: int, n_tokens: int, rows: list, result: dict,
                 window: int = 4, ablations: bool = True, rounds: int = 1):
    """softeval's tuning step against PEFT's; ``rounds`` x ``steps`` distinct batches of the seeded
    plan (the first ones: the same in quick and full mode), interleaved step by step."""
    from peft import PromptTuningConfig, get_peft_model

    plan = tune_batches(len(train), batch_size, steps * rounds + 1, seed=0)
    pairs = {i: (prompter.ids(train[i], "soft-prompt"), prompter.target_ids(train[i])) for b in plan for i in b}
    lengths = lambda i: len(pairs[i][0]) + len(pairs[i][1])
    grouped = length_grouped(plan[:steps], lengths, window=window, seed=0)  # same items as plan[:steps]

    soft = SoftPrompt.initialise(lm, n_tokens, "vocab", 0).to(lm.device)
    opt = torch.optim.AdamW([soft.weight], lr=3e-2)

    def se_step(batch, max_pass_tokens=None):
        opt.zero_grad(set_to_none=True)
        loss = tuning_loss.target_loss_backward(lm, [pairs[i][0] for i in batch], [pairs[i][1] for i in batch],
                                                soft.weight, max_pass_tokens)
        opt.step()
        return loss

    budget = memory.tuning_pass_tokens(lm)

    def pad_stats(p):  # real and padded tokens of the forward passes (a batch split as the engine splits it)
        real = sum(lengths(i) for b in p for i in b)
        padded = 0
        for b in p:
            for rows in batching.tuning_passes([lengths(i) for i in b], budget):
                padded += max(lengths(b[r]) for r in rows) * len(rows)
        return real, padded

    # softeval alone first: warm-up, then the first interleaved step (softeval goes first at k = 0),
    # timed here so that softeval's peak RSS is read before any PEFT step or ablation; then (full
    # mode) the ablations: seeded plan vs length-grouped plan, and the whole batch in one pass.
    se_step(plan[-1])  # warm-up
    t_se, t_peft = [0.0] * rounds, [0.0] * rounds
    _, t_se[0] = timed(lambda: se_step(plan[0]))
    result["peak_rss_gib"] = round(rss_gib(), 3)
    real, padded = pad_stats(plan[:steps * rounds])
    result["tune_pass_tokens"] = budget
    result["tune_tokens"] = {"real": real, "padded": padded}
    if ablations:
        _, t_plain = timed(lambda: [se_step(b) for b in plan[:steps]])
        real_p, padded_p = pad_stats(plan[:steps])
        rows.append(("tune: softeval, seeded plan", f"{steps / t_plain:.3f} steps/s",
                     f"tokens {real_p}, padded {padded_p}"))
        _, t_grouped = timed(lambda: [se_step(b) for b in grouped[:steps]])
        real_g, padded_g = pad_stats(grouped[:steps])
        rows.append(("tune: softeval, length-grouped plan", f"{steps / t_grouped:.3f} steps/s",
                     f"tokens {real_g}, padded {padded_g}"))
        result["tune_grouping_gain"] = round(t_plain / t_grouped, 3)
        _, t_whole = timed(lambda: [se_step(b, max_pass_tokens=10**9) for b in plan[:steps]])
        rows.append(("tune: softeval, whole batch in one pass", f"{steps / t_whole:.3f} steps/s",
                     f"padded {sum(max(lengths(i) for i in b) * len(b) for b in plan[:steps])}; "
                     "not the default: memory grows with batch x longest row"))
        result["tune_split_gain"] = round(t_whole / t_plain, 3)

    # Phase 2: PEFT vs softeval, interleaved step by step, same batches (the seeded plan).
    peft_model = get_peft_model(lm.model, PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=n_tokens))
    peft_opt = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=3e-2)
    pad = lm.pad_id

    def peft_step(batch):
        seqs = [pairs[i][0] + pairs[i][1] for i in batch]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        labels = torch.full_like(ids, -100)
        for r, i in enumerate(batch):
            s = seqs[r]
            ids[r, :len(s)] = torch.tensor(s)
            mask[r, :len(s)] = 1
            labels[r, len(pairs[i][0]):len(s)] = torch.tensor(pairs[i][1])
        out = peft_model(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device), labels=labels.to(lm.device))
        peft_opt.zero_grad(set_to_none=True)
        out.loss.backward()
        peft_opt.step()
        return float(out.loss.detach())

    peft_model.train()
    peft_step(plan[-1])  # warm-up
    for k, b in enumerate(plan[:steps * rounds]):
        order = [(se_step, 0), (peft_step, 1)] if k % 2 == 0 else [(peft_step, 1), (se_step, 0)]
        for fn, side in order:
            if k == 0 and side == 0:
                continue  # timed above
            _, dt = timed(lambda fn=fn, b=b: fn(b))
            (t_se if side == 0 else t_peft)[k // steps] += dt
    n = steps * rounds
    rows.append(("tune: softeval (interleaved)", f"{n / sum(t_se):.3f} steps/s", f"tokens {real}, padded {padded}"))
    rows.append(("tune: PEFT PromptTuning, full-logit CE", f"{n / sum(t_peft):.3f} steps/s", ""))
    ratios = spread([p / s for p, s in zip(t_peft, t_se)])
    result["tune_speedup_vs_peft"] = ratios["median"]
    result.setdefault("spread", {})["tune_speedup_vs_peft"] = ratios
    result["tune_steps_per_s"] = {"softeval": round(n / sum(t_se), 4), "peft": round(n / sum(t_peft), 4)}
    # tune_mfu: model FLOPs of softeval's steps (forward + activation backward over the real tokens)
    # per second, against a square matmul's FLOP/s measured now, in the model's dtype (and the other).
    shape = Shape.of(lm.model.config)
    flops = sum(tuning_step_flops(shape, [(lengths(i) + n_tokens, len(pairs[i][1])) for i in b])
                for b in plan[:n])
    peak = {name: matmul_peak(lm.device, dt, seconds=1.0) for name, dt in
            (("float32", torch.float32), ("bfloat16", torch.bfloat16))}
    dtype = str(next(lm.model.parameters()).dtype).replace("torch.", "")
    achieved = flops / sum(t_se)
    result["tune_mfu"] = round(achieved / peak.get(dtype, peak["float32"]), 4)
    result["tune_flops"] = {"gflop_per_step": round(flops / n / 1e9, 1), "achieved_gflops": round(achieved / 1e9, 2),
                            "matmul_peak_gflops": {k: round(v / 1e9, 2) for k, v in peak.items()}, "dtype": dtype}
    rows.append(("tune: FLOP/s vs matmul peak", f"{result['tune_mfu']:.3f} of peak",
                 f"{achieved / 1e9:.1f} GFLOP/s, {dtype} matmul peak {peak.get(dtype, peak['float32']) / 1e9:.1f}"))
    peft_model.eval()
    base = peft_model.get_base_model()
    peft_model = peft_opt = None  # drop the wrapper; the base model is kept
    lm.model = base
    lm.model.eval()
    lm.model.requires_grad_(False)
    gc.collect()


def bench_generation(lm, side: LmEvalSide, task, prompter, items, method, batch_size, rounds, flip, rows):
    texts = [prompter.text(e, method) for e in items]
    docs = [{"prompt": t, "gold": e.gold} for t, e in zip(texts, items)]
    instances = side.task_instances(docs, "generate_until", until=task.stop, max_gen_toks=task.max_new_tokens)
    assert [i.args[0] for i in instances] == texts, "lm-eval did not build the same prompts"

    def run_softeval():
        seqs = [prompter.ids(e, method) for e in items]
        return generation.generate(lm, seqs, max_new_tokens=task.max_new_tokens, stop=task.stop,
                                   batch_size=batch_size).texts

    def run_lmeval():
        return side.generate(instances)

    # warm-up on two items each
    generation.generate(lm, [prompter.ids(e, method) for e in items[:2]], max_new_tokens=2, stop=task.stop)
    side.hflm.generate_until(side.task_instances(docs[:2], "generate_until", until=task.stop, max_gen_toks=2),
                             disable_tqdm=True)
    (ours, theirs), (t_se, t_lm) = interleave(rounds, run_softeval, run_lmeval, flip)
    acc_se = sum(score_output(task, e, o)["correct"] for e, o in zip(items, ours)) / len(items)
    acc_lm = sum(score_output(task, e, o)["correct"] for e, o in zip(items, theirs)) / len(items)
    same = sum(a == b for a, b in zip(ours, theirs))
    n = len(items) * rounds
    rows.append((f"{task.name} {method} generate: softeval", f"{n / sum(t_se):.3f} items/s", f"acc {acc_se:.3f}"))
    rows.append((f"{task.name} {method} generate: lm-eval", f"{n / sum(t_lm):.3f} items/s",
                 f"acc {acc_lm:.3f}; identical outputs {same}/{len(items)}"))
    return {"t_softeval": t_se, "t_lmeval": t_lm, "n": len(items), "same": same,
            "correct_softeval": acc_se * len(items), "correct_lmeval": acc_lm * len(items), "mismatch_examples": [
                {"softeval": a, "lmeval": b} for a, b in zip(ours, theirs) if a != b][:3]}


def bench_loglik(lm, side: LmEvalSide, task, prompter, items, method, batch_size, rounds, flip, rows):
    texts = [prompter.text(e, method) for e in items]
    letters = ["".join(prompter.lm.tokenizer.decode(o) for o in [ids]) for ids in prompter.option_ids(items[0])]
    docs = [{"prompt": t, "choices": [prompter.lm.tokenizer.decode(o) for o in prompter.option_ids(e)],
             "label": "ABCDEFGHIJ".index(e.gold)} for t, e in zip(texts, items)]
    instances = side.task_instances(docs, "multiple_choice")

    def run_softeval():
        seqs = [prompter.ids(e, method) for e in items]
        return loglik.option_logprobs(lm, seqs, [prompter.option_ids(e) for e in items], batch_size=batch_size)

    def run_lmeval():
        return side.loglik(instances)

    loglik.option_logprobs(lm, [prompter.ids(e, method) for e in items[:2]],
                           [prompter.option_ids(e) for e in items[:2]])
    side.hflm.loglikelihood(side.task_instances(docs[:2], "multiple_choice"), disable_tqdm=True)
    (ours, theirs), (t_se, t_lm) = interleave(rounds, run_softeval, run_lmeval, flip)
    pick = lambda s: max(range(len(s)), key=lambda j: s[j])
    acc_se = sum(d["label"] == pick(s) for d, s in zip(docs, ours)) / len(items)
    acc_lm = sum(d["label"] == pick(s) for d, s in zip(docs, theirs)) / len(items)
    same_pick = sum(pick(a) == pick(b) for a, b in zip(ours, theirs))
    n = len(items) * rounds
    rows.append((f"{task.name} {method} loglik: softeval", f"{n / sum(t_se):.3f} items/s", f"acc {acc_se:.3f}"))
    rows.append((f"{task.name} {method} loglik: lm-eval", f"{n / sum(t_lm):.3f} items/s",
                 f"acc {acc_lm:.3f}; same argmax {same_pick}/{len(items)}; options {letters}"))
    return {"t_softeval": t_se, "t_lmeval": t_lm, "n": len(items), "acc_softeval": acc_se, "acc_lmeval": acc_lm,
            "same_pick": same_pick}


def _ablation(rows: list, label: str, on, off, rounds: int, detail: str) -> float:
    """Time a speed path on and off (interleaved), record the row, return the gain (off / on)."""
    (a, b), (t_on, t_off) = interleave(rounds, on, off, False)
    t_on, t_off = sum(t_on), sum(t_off)
    rows.append((label, f"{t_off / t_on:.2f}x", f"{detail}; identical {sum(x == y for x, y in zip(a, b))}/{len(a)}"))
    return t_off / t_on


def ablation_prefix(lm, task, prompter, items, method, batch_size, rows):
    """softeval with and without the shared-prefix cache (is the cache worth keeping?)."""
    seqs = [prompter.ids(e, method) for e in items]
    kw = {"max_new_tokens": task.max_new_tokens, "stop": task.stop, "batch_size": batch_size}
    return _ablation(rows, f"ablation {task.name} {method}: prefix cache on/off",
                     lambda: generation.generate(lm, seqs, prefix_cache=None, **kw).texts,
                     lambda: generation.generate(lm, seqs, prefix_cache=False, **kw).texts, 1,
                     f"shared {batching.common_prefix_len(seqs)} of ~{sum(map(len, seqs)) // len(seqs)} tokens")


def ablation_switch(owner, flag: str, what: str, lm, task, prompter, items, method, batch_size, rows):
    """softeval's generation with a speed path's module flag on and off (``kv_cache.GROWING_CACHE``:
    its in-place growing KV cache vs transformers' DynamicCache; ``skinny.ENABLED``: few-row
    linears as W @ x^T vs F.linear)."""
    seqs = [prompter.ids(e, method) for e in items]
    kw = {"max_new_tokens": task.max_new_tokens, "stop": task.stop, "batch_size": batch_size}

    default = getattr(owner, flag)

    def run(on: bool):
        setattr(owner, flag, on)
        try:
            return generation.generate(lm, seqs, **kw).texts
        finally:
            setattr(owner, flag, default)

    return _ablation(rows, f"ablation {task.name} {method}: {what}", lambda: run(True), lambda: run(False), 2,
                     f"{len(seqs)} items, max_new_tokens {kw['max_new_tokens']}")


def main(argv=None) -> int:
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
    args = ap.parse_args(argv)
    mode = "quick" if args.quick else "full"
    cfg = dict(MODES[mode])
    cfg["rounds"] = args.rounds or cfg["rounds"]
    skip = set(filter(None, args.skip.split(",")))
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    started = time.time()
    rows: list[tuple[str, str, str]] = Rows()
    result: dict = {"mode": mode, "model": args.model, "batch_size": args.batch_size, "threads": args.threads,
                    "rounds": cfg["rounds"], "spread": {}}

    lm = load_model(args.model, device=args.device, dtype=args.dtype)
    result.update(device=str(lm.device), dtype=str(next(lm.model.parameters()).dtype).replace("torch.", ""))
    log(f"loaded {args.model} on {lm.device} in {lm.load_seconds:.1f}s")
    chat = use_chat_template(lm, "auto")
    tasks = {name: get_task(name) for name in ("mmlu", "gsm8k")}
    splits = {name: t.load("offline") for name, t in tasks.items()}
    prompters = {name: Prompter(lm, tasks[name], chat, pick_shots(splits[name].tune, args.shots, 0))
                 for name in tasks}
    items = {"mmlu": seeded_subset(splits["mmlu"].eval, cfg["mmlu"], 0),
             "gsm8k": seeded_subset(splits["gsm8k"].eval, cfg["gsm8k"], 0)}

    if "tune" not in skip:
        log(f"tuning: softeval vs PEFT ({time.time() - started:.0f}s)")
        train = splits["mmlu"].tune
        result["tune_items"] = len(train)
        bench_tuning(lm, prompters["mmlu"], train, cfg["tune_steps"], args.batch_size, args.tokens,
                     rows, result, window=cfg["group_window"], ablations=cfg["tune_ablations"], rounds=cfg["rounds"])
    else:
        result["peak_rss_gib"] = None

    with tempfile.TemporaryDirectory(prefix="softeval-bench-") as tmp:
        side = LmEvalSide(lm, args.batch_size, Path(tmp))
        gen: dict = {}
        if "generate" not in skip:
            flip = False
            for name in ("mmlu", "gsm8k"):
                for method in ("zero-shot", "few-shot"):
                    log(f"generate: {name} {method} ({time.time() - started:.0f}s)")
                    gen[(name, method)] = bench_generation(lm, side, tasks[name], prompters[name], items[name], method,
                                                           args.batch_size, cfg["rounds"], flip, rows)
                    flip = not flip
            for method, key in (("zero-shot", "zeroshot"), ("few-shot", "fewshot")):
                for suffix, names in (("", ("mmlu", "gsm8k")), ("_mmlu", ("mmlu",)), ("_gsm8k", ("gsm8k",))):
                    ratios = spread(round_ratios([gen[(n, method)] for n in names]))
                    result[f"{key}_speedup_vs_lmeval{suffix}"] = ratios["median"]
                    result["spread"][f"{key}_speedup_vs_lmeval{suffix}"] = ratios
            all_parts = list(gen.values())
            n_items = sum(p["n"] for p in all_parts)
            result["output_agreement"] = round(sum(p["same"] for p in all_parts) / n_items, 4)
            for side in ("softeval", "lmeval"):
                result[f"accuracy_{side}"] = {f"{n}/{m}": round(p[f"correct_{side}"] / p["n"], 4)
                                              for (n, m), p in gen.items()}
            result["mismatch_examples"] = {f"{n}/{m}": p["mismatch_examples"] for (n, m), p in gen.items()
                                           if p["mismatch_examples"]}
        if "loglik" not in skip:
            ll_items = seeded_subset(splits["mmlu"].eval, cfg["loglik"], 0)
            ll = {}
            for k, method in enumerate(("zero-shot", "few-shot")):
                log(f"loglik: mmlu {method} ({time.time() - started:.0f}s)")
                ll[method] = bench_loglik(lm, side, tasks["mmlu"], prompters["mmlu"], ll_items, method,
                                          args.batch_size, cfg["rounds"], bool(k), rows)
            for suffix, parts in (("", list(ll.values())), *((f"_{m}", [p]) for m, p in ll.items())):
                ratios = spread(round_ratios(parts))
                result[f"loglik_speedup_vs_lmeval{suffix}"] = ratios["median"]
                result["spread"][f"loglik_speedup_vs_lmeval{suffix}"] = ratios
            result["loglik_accuracy_softeval"] = {m: round(p["acc_softeval"], 4) for m, p in ll.items()}
            result["loglik_accuracy_lmeval"] = {m: round(p["acc_lmeval"], 4) for m, p in ll.items()}
            result["loglik_same_argmax"] = round(sum(p["same_pick"] for p in ll.values())
                                                 / sum(p["n"] for p in ll.values()), 4)
    if "ablation" not in skip and cfg["ablation"]:  # the ablations are in the full mode only
        log(f"ablation: prefix cache ({time.time() - started:.0f}s)")
        result["prefix_cache_gain"] = {
            f"{name}/{method}": round(ablation_prefix(lm, tasks[name], prompters[name],
                                                      items[name][:cfg["ablation_items"]], method, args.batch_size,
                                                      rows), 3)
            for name, method in cfg["ablation"]}
        for key, owner, flag, what in (
                ("growing_cache_gain", kv_cache, "GROWING_CACHE", "growing cache vs DynamicCache"),
                ("skinny_linear_gain", skinny, "ENABLED", "W @ x^T vs F.linear on few rows")):
            log(f"ablation: {what} ({time.time() - started:.0f}s)")
            result[key] = round(ablation_switch(owner, flag, what, lm, tasks["gsm8k"], prompters["gsm8k"],
                                                items["gsm8k"][:cfg["ablation_items"]], "zero-shot",
                                                args.batch_size, rows), 3)
    result["seconds"] = round(time.time() - started, 1)
    result["machine"] = f"{platform.machine()} {platform.processor() or ''} cpus={os.cpu_count()} " \
                        f"torch={torch.__version__} threads={args.threads}".strip()

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
    if args.json_out:
        Path(args.json_out).write_text(line + "\n")
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
