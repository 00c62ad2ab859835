"""The GPU check's ``vllm`` section (gpu_check.py): soft-prompt generation on softeval's vLLM backend against
its HF engine, at the shapes of Llama-3.2-1B and Llama-3.1-8B.

Imported by gpu_check.py, which puts the repository's ``src/`` on the path first.
"""

from __future__ import annotations

import gc

import torch
from gpu_check_inputs import PLANS, SHAPES, TINY_SHAPES, build_model, loaded, log, soft_prompt, timed

from softeval.lm import generation


def section_vllm(device, dtype, plan, tok, prompts) -> dict:
    """Soft-prompt generation on softeval's vLLM backend against its HF engine at the 1B and 8B shapes
    (random weights saved to a temporary folder, which vLLM loads): agreement and speed. Runs where vLLM
    imports; elsewhere it says so and what stays unchecked."""
    import importlib.util
    import tempfile

    if importlib.util.find_spec("vllm") is None:
        return {"skipped": "vLLM is not installed here: the vLLM backend on CUDA stays unchecked"}
    from softeval.lm.vllm_engine import VllmEngine

    out: dict = {}
    for name in ("llama_1b", "llama_8b"):
        shape = (TINY_SHAPES if plan is PLANS["tiny"] else SHAPES)[name]
        with tempfile.TemporaryDirectory() as folder:
            model = build_model(shape, device, dtype)
            model.save_pretrained(folder)
            tok.save_pretrained(folder)
            lm = loaded(model, tok, name)
            lm.source = folder
            engine, t_start = timed(device, lambda lm=lm: VllmEngine(lm, {"max_model_len": 4096}))
            seqs = prompts.prompts("gsm8k", plan["gen_items"])
            s = soft_prompt(lm)
            new = 64
            hf, t_hf = timed(device, lambda: generation.generate(lm, seqs, soft=s, max_new_tokens=new,
                                                                  batch_size="auto").texts)
            ours, t_v = timed(device, lambda: engine.generate(seqs, soft=s, max_new_tokens=new).texts)
            # letters' log-probabilities off the first step (MMLU on --backend vllm) against the HF model's
            letters = [[10, 20, 30, 40]] * len(seqs)
            hf_first = generation.generate(lm, seqs, soft=s, max_new_tokens=1, batch_size="auto",
                                           first_ids=letters).first_logprobs
            firsts = engine.generate(seqs, soft=s, max_new_tokens=1, first_ids=letters).first_logprobs
            engine.close()
            out[name] = {"engine_start_s": round(t_start, 1), "items": len(seqs), "new_tokens": new,
                         "hf_items_per_s": round(len(seqs) / t_hf, 2), "vllm_items_per_s": round(len(seqs) / t_v, 2),
                         "vllm_vs_hf": round(t_hf / t_v, 2), "identical": sum(a == b for a, b in zip(hf, ours)),
                         "letters_max_abs_diff": round(max(abs(a - b) for i, v in enumerate(firsts)
                                                           for a, b in zip(v, hf_first[i])), 4),
                         "gpu_memory_utilization": engine.record()["engine_args"].get(
                             "gpu_memory_utilization")}
            log(f"vllm {name}: {out[name]}")
            lm = model = engine = None
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
    # random weights make near-ties common: agreement is information here, speed and a clean run the check
    out["ok"] = all(v["vllm_items_per_s"] > 0 for v in out.values() if isinstance(v, dict))
    return out
