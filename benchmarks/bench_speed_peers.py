"""The sections of the speed benchmark (bench_speed.py) that time softeval against its peers: the tuning step
against a plain PEFT prompt-tuning loop, generation and option log-likelihoods against lm-evaluation-harness's
``HFLM`` (``LmEvalSide``), and the interleaved timing that they and bench_speed.py's ablations share.

Imported by bench_speed.py, which sets the offline and quiet environment first; peft and lm-eval are imported
where they are used (the ``bench`` extra).
"""

from __future__ import annotations

import gc
import json
import logging
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from perf import Shape, matmul_peak, tuning_step_flops  # benchmarks/perf.py, beside this script

from softeval.lm import batching, generation, loglik, memory, precision, tuning_loss
from softeval.lm.softprompt import SoftPrompt
from softeval.run.scoring import score_output
from softeval.run.tuning_loop import batches as tune_batches
from softeval.run.tuning_loop import length_grouped


def rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux


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

@dataclass
class Timing:
    """What every section shares: the batch size of both sides, the interleaved rounds and the table's rows."""

    batch_size: int
    rounds: int
    rows: list


@dataclass
class Items:
    """What a generation or log-likelihood section compares on: a task, its prompter, the items and the method
    whose prompts they get."""

    task: Any
    prompter: Any
    items: list
    method: str


@dataclass
class TuneSection:
    """The tuning section's settings: ``steps`` per round, the soft prompt's ``n_tokens``, the length-grouping
    ``window`` and whether the ablations run (full mode)."""

    steps: int
    n_tokens: int
    window: int = 4
    ablations: bool = True


def bench_tuning(lm, prompter, train, timing: Timing, result: dict, how: TuneSection):
    """softeval's tuning step against PEFT's; ``rounds`` x ``steps`` distinct batches of the seeded
    plan (the first ones: the same in quick and full mode), interleaved step by step."""
    from peft import PromptTuningConfig, get_peft_model

    steps, rounds = how.steps, timing.rounds
    ours = _SoftevalTuning(lm, prompter, train, how, timing)
    # softeval alone first: warm-up, then the first interleaved step (softeval goes first at k = 0),
    # timed here so that softeval's peak RSS is read before any PEFT step or ablation; then (full
    # mode) the ablations: seeded plan vs length-grouped plan, and the whole batch in one pass.
    ours.step(ours.plan[-1])  # warm-up
    t_se, t_peft = [0.0] * rounds, [0.0] * rounds
    _, t_se[0] = timed(lambda: ours.step(ours.plan[0]))
    result["peak_rss_gib"] = round(rss_gib(), 3)
    real, padded = ours.pad_stats(ours.plan[:steps * rounds])
    result["tune_pass_tokens"] = ours.budget
    result["tune_tokens"] = {"real": real, "padded": padded}
    if how.ablations:
        _tuning_ablations(ours, steps, timing.rows, result)

    # Phase 2: PEFT vs softeval, interleaved step by step, same batches (the seeded plan).
    theirs = _PeftTuning(get_peft_model(ours.tuner.model, PromptTuningConfig(task_type="CAUSAL_LM",
                                                                             num_virtual_tokens=how.n_tokens)),
                         lm.pad_id, ours)
    theirs.model.train()
    theirs.step(ours.plan[-1])  # warm-up
    n = steps * rounds
    _interleaved_steps(ours, theirs, ours.plan[:n], steps, (t_se, t_peft))
    timing.rows.append(("tune: softeval (interleaved)", f"{n / sum(t_se):.3f} steps/s",
                        f"tokens {real}, padded {padded}"))
    timing.rows.append(("tune: PEFT PromptTuning, full-logit CE", f"{n / sum(t_peft):.3f} steps/s", ""))
    ratios = spread([p / s for p, s in zip(t_peft, t_se)])
    result["tune_speedup_vs_peft"] = ratios["median"]
    result.setdefault("spread", {})["tune_speedup_vs_peft"] = ratios
    result["tune_steps_per_s"] = {"softeval": round(n / sum(t_se), 4), "peft": round(n / sum(t_peft), 4)}
    _tuning_mfu(lm, ours, sum(t_se), (ours.plan[:n], how.n_tokens), timing.rows, result)
    _release(lm, ours, theirs)


class _SoftevalTuning:
    """softeval's side of the tuning section: the seeded plan of ``rounds`` x ``steps`` + 1 batches (and its first
    ``steps`` grouped by length), each item's prompt and target ids, the soft prompt and its AdamW."""

    def __init__(self, lm, prompter, train, how: TuneSection, timing: Timing) -> None:
        self.plan = tune_batches(len(train), timing.batch_size, how.steps * timing.rounds + 1, seed=0)
        self.pairs = {i: (prompter.ids(train[i], "soft-prompt"), prompter.target_ids(train[i]))
                      for b in self.plan for i in b}
        self.grouped = length_grouped(self.plan[:how.steps], self.length, window=how.window, seed=0)  # same items
        self.soft = SoftPrompt.initialise(lm, how.n_tokens, "vocab", 0).to(lm.device)
        self.opt = torch.optim.AdamW([self.soft.weight], lr=3e-2)
        # what `softeval run` tunes on (--tune-dtype auto): the model in the run's dtype; PEFT gets
        # the same weights, so the comparison is of the two tuning loops in one dtype
        self.tuner = precision.for_tuning(lm, "auto")
        self.budget = memory.tuning_pass_tokens(self.tuner)

    def length(self, i: int) -> int:
        return len(self.pairs[i][0]) + len(self.pairs[i][1])

    def step(self, batch, max_pass_tokens=None):
        self.opt.zero_grad(set_to_none=True)
        loss = tuning_loss.target_loss_backward(self.tuner, [self.pairs[i][0] for i in batch],
                                                [self.pairs[i][1] for i in batch], self.soft.weight, max_pass_tokens)
        self.opt.step()
        return loss

    def pad_stats(self, plan) -> tuple[int, int]:
        """Real and padded tokens of the forward passes (a batch split as the engine splits it)."""
        real = sum(self.length(i) for b in plan for i in b)
        padded = 0
        for b in plan:
            for rows in batching.tuning_passes([self.length(i) for i in b], self.budget):
                padded += max(self.length(b[r]) for r in rows) * len(rows)
        return real, padded


def _tuning_ablations(ours: _SoftevalTuning, steps: int, rows: list, result: dict) -> None:
    """softeval's tuning on the seeded plan, the length-grouped plan and with the whole batch in one pass."""
    plan = ours.plan[:steps]
    _, t_plain = timed(lambda: [ours.step(b) for b in plan])
    real_p, padded_p = ours.pad_stats(plan)
    rows.append(("tune: softeval, seeded plan", f"{steps / t_plain:.3f} steps/s",
                 f"tokens {real_p}, padded {padded_p}"))
    _, t_grouped = timed(lambda: [ours.step(b) for b in ours.grouped[:steps]])
    real_g, padded_g = ours.pad_stats(ours.grouped[:steps])
    rows.append(("tune: softeval, length-grouped plan", f"{steps / t_grouped:.3f} steps/s",
                 f"tokens {real_g}, padded {padded_g}"))
    result["tune_grouping_gain"] = round(t_plain / t_grouped, 3)
    _, t_whole = timed(lambda: [ours.step(b, max_pass_tokens=10**9) for b in plan])
    rows.append(("tune: softeval, whole batch in one pass", f"{steps / t_whole:.3f} steps/s",
                 f"padded {sum(max(ours.length(i) for i in b) * len(b) for b in plan)}; "
                 "not the default: memory grows with batch x longest row"))
    result["tune_split_gain"] = round(t_whole / t_plain, 3)


class _PeftTuning:
    """PEFT's side: its prompt-tuning wrapper (``model``) on softeval's tuning weights, right-padded rows with
    ``labels`` (-100 on prompt and pads), full-vocabulary logits and cross-entropy."""

    def __init__(self, model, pad: int, ours: _SoftevalTuning) -> None:
        self.model, self.pad, self.ours = model, pad, ours
        self.opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-2)

    def step(self, batch):
        pairs, device = self.ours.pairs, self.ours.tuner.device
        seqs = [pairs[i][0] + pairs[i][1] for i in batch]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        labels = torch.full_like(ids, -100)
        for r, i in enumerate(batch):
            s = seqs[r]
            ids[r, :len(s)] = torch.tensor(s)
            mask[r, :len(s)] = 1
            labels[r, len(pairs[i][0]):len(s)] = torch.tensor(pairs[i][1])
        out = self.model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device))
        self.opt.zero_grad(set_to_none=True)
        out.loss.backward()
        self.opt.step()
        return float(out.loss.detach())


def _interleaved_steps(ours: _SoftevalTuning, theirs: _PeftTuning, plan, steps: int, seconds) -> None:
    """Both sides on each batch of ``plan``, alternating which goes first; into ``seconds`` (softeval's, PEFT's)
    each round's (``steps`` batches a round). softeval's first step was timed alone before."""
    for k, b in enumerate(plan):
        order = [(ours.step, 0), (theirs.step, 1)] if k % 2 == 0 else [(theirs.step, 1), (ours.step, 0)]
        for fn, side in order:
            if k == 0 and side == 0:
                continue  # timed above
            _, dt = timed(lambda fn=fn, b=b: fn(b))
            seconds[side][k // steps] += dt


def _tuning_mfu(lm, ours: _SoftevalTuning, seconds: float, timed_plan, rows: list, result: dict) -> None:
    """tune_mfu: model FLOPs of softeval's steps (``timed_plan``: the batches timed and the soft prompt's length;
    forward + activation backward over the real tokens) per second, against a square matmul's FLOP/s measured
    now, in the dtype tuning ran in (and the other)."""
    plan, n_tokens = timed_plan
    shape = Shape.of(lm.model.config)
    flops = sum(tuning_step_flops(shape, [(ours.length(i) + n_tokens, len(ours.pairs[i][1])) for i in b])
                for b in plan)
    peak = {name: matmul_peak(lm.device, dt, seconds=1.0) for name, dt in
            (("float32", torch.float32), ("bfloat16", torch.bfloat16))}
    dtype = precision.dtype_name(precision.model_dtype(ours.tuner))
    achieved = flops / seconds
    result["tune_mfu"] = round(achieved / peak.get(dtype, peak["float32"]), 4)
    result["tune_flops"] = {"gflop_per_step": round(flops / len(plan) / 1e9, 1),
                            "achieved_gflops": round(achieved / 1e9, 2),
                            "matmul_peak_gflops": {k: round(v / 1e9, 2) for k, v in peak.items()}, "dtype": dtype}
    rows.append(("tune: FLOP/s vs matmul peak", f"{result['tune_mfu']:.3f} of peak",
                 f"{achieved / 1e9:.1f} GFLOP/s, {dtype} matmul peak {peak.get(dtype, peak['float32']) / 1e9:.1f}"))


def _release(lm, ours: _SoftevalTuning, theirs: _PeftTuning) -> None:
    """Drop PEFT's wrapper and its optimizer (and the bf16 copy tuning ran on); the base model is kept."""
    theirs.model.eval()
    base = theirs.model.get_base_model()
    theirs.model = theirs.opt = ours.tuner = None
    if base.dtype == lm.model.dtype:
        lm.model = base
    lm.model.eval()
    lm.model.requires_grad_(False)
    gc.collect()


def bench_generation(lm, side: LmEvalSide, what: Items, timing: Timing, flip: bool):
    task, prompter, items, method = what.task, what.prompter, what.items, what.method
    texts = [prompter.text(e, method) for e in items]
    docs = [{"prompt": t, "gold": e.gold} for t, e in zip(texts, items)]
    instances = side.task_instances(docs, "generate_until", until=task.stop, max_gen_toks=task.max_new_tokens)
    assert [i.args[0] for i in instances] == texts, "lm-eval did not build the same prompts"

    def run_softeval():
        seqs = [prompter.ids(e, method) for e in items]
        return generation.generate(lm, seqs, max_new_tokens=task.max_new_tokens, stop=task.stop,
                                   batch_size=timing.batch_size).texts

    def run_lmeval():
        return side.generate(instances)

    # warm-up on two items each
    generation.generate(lm, [prompter.ids(e, method) for e in items[:2]], max_new_tokens=2, stop=task.stop)
    side.hflm.generate_until(side.task_instances(docs[:2], "generate_until", until=task.stop, max_gen_toks=2),
                             disable_tqdm=True)
    (ours, theirs), (t_se, t_lm) = interleave(timing.rounds, run_softeval, run_lmeval, flip)
    acc_se = sum(score_output(task, e, o)["correct"] for e, o in zip(items, ours)) / len(items)
    acc_lm = sum(score_output(task, e, o)["correct"] for e, o in zip(items, theirs)) / len(items)
    same = sum(a == b for a, b in zip(ours, theirs))
    n = len(items) * timing.rounds
    timing.rows.append((f"{task.name} {method} generate: softeval", f"{n / sum(t_se):.3f} items/s",
                        f"acc {acc_se:.3f}"))
    timing.rows.append((f"{task.name} {method} generate: lm-eval", f"{n / sum(t_lm):.3f} items/s",
                        f"acc {acc_lm:.3f}; identical outputs {same}/{len(items)}"))
    return {"t_softeval": t_se, "t_lmeval": t_lm, "n": len(items), "same": same,
            "correct_softeval": acc_se * len(items), "correct_lmeval": acc_lm * len(items), "mismatch_examples": [
                {"softeval": a, "lmeval": b} for a, b in zip(ours, theirs) if a != b][:3]}


def bench_loglik(lm, side: LmEvalSide, what: Items, timing: Timing, flip: bool):
    task, prompter, items, method = what.task, what.prompter, what.items, what.method
    texts = [prompter.text(e, method) for e in items]
    letters = ["".join(prompter.lm.tokenizer.decode(o) for o in [ids]) for ids in prompter.option_ids(items[0])]
    docs = [{"prompt": t, "choices": [prompter.lm.tokenizer.decode(o) for o in prompter.option_ids(e)],
             "label": "ABCDEFGHIJ".index(e.gold)} for t, e in zip(texts, items)]
    instances = side.task_instances(docs, "multiple_choice")

    def run_softeval():
        seqs = [prompter.ids(e, method) for e in items]
        return loglik.option_logprobs(lm, seqs, [prompter.option_ids(e) for e in items],
                                      batch_size=timing.batch_size)

    def run_lmeval():
        return side.loglik(instances)

    loglik.option_logprobs(lm, [prompter.ids(e, method) for e in items[:2]],
                           [prompter.option_ids(e) for e in items[:2]])
    side.hflm.loglikelihood(side.task_instances(docs[:2], "multiple_choice"), disable_tqdm=True)
    (ours, theirs), (t_se, t_lm) = interleave(timing.rounds, run_softeval, run_lmeval, flip)
    pick = lambda s: max(range(len(s)), key=lambda j: s[j])
    acc_se = sum(d["label"] == pick(s) for d, s in zip(docs, ours)) / len(items)
    acc_lm = sum(d["label"] == pick(s) for d, s in zip(docs, theirs)) / len(items)
    same_pick = sum(pick(a) == pick(b) for a, b in zip(ours, theirs))
    n = len(items) * timing.rounds
    timing.rows.append((f"{task.name} {method} loglik: softeval", f"{n / sum(t_se):.3f} items/s", f"acc {acc_se:.3f}"))
    timing.rows.append((f"{task.name} {method} loglik: lm-eval", f"{n / sum(t_lm):.3f} items/s",
                        f"acc {acc_lm:.3f}; same argmax {same_pick}/{len(items)}; options {letters}"))
    return {"t_softeval": t_se, "t_lmeval": t_lm, "n": len(items), "acc_softeval": acc_se, "acc_lmeval": acc_lm,
            "same_pick": same_pick}
