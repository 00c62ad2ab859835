"""Why is bf16 tuning slower than fp32 on CUDA for a small model? Step times of softeval's tuning step
(``tuning_loss.target_loss_backward``) in fp32 and bf16 on random-weight Llama models of SmolLM2-135M's and
Llama-3.2-1B's shapes, per attention backend, on the check's MMLU soft-prompt batches (ragged lengths, as
real batches are): the first pass over 8 batches (shapes never seen) and a second pass over the same
batches (shapes seen), and the kernels launched per step. Prints one JSON line per row.

    python3 benchmarks/gpu_tune_dtype.py --json-out tune_dtype.json       # on a CUDA machine, ~1-2 min
    PYTHONPATH=src python benchmarks/gpu_tune_dtype.py --tiny              # the same code path on a CPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402
from gpu_check_inputs import Prompts, build_model, load_tokenizer, loaded, soft_prompt  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from softeval.lm import tuning_loss  # noqa: E402

SHAPES = {
    "smollm2_135m": dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True),
    "llama_1b": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                     intermediate_size=8192, vocab_size=128256, tie_word_embeddings=True),
}
TINY = {"smollm2_135m": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             intermediate_size=128, vocab_size=4096, tie_word_embeddings=True)}
BACKENDS = {"default": None, "no_cudnn": [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                                          SDPBackend.MATH], "math": [SDPBackend.MATH]}
BATCH, N_BATCHES = 8, 8


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def kernels_per_step(lm, p, t, soft, device) -> dict | None:
    """CUDA kernels one step launches, and the 6 that take the most device time (name, count, ms)."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            tuning_loss.target_loss_backward(lm, p, t, soft)
            sync(device)
        events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
        top = sorted(events, key=lambda e: -e.self_device_time_total)[:6]
        return {"launches": sum(e.count for e in events),
                "device_ms": round(sum(e.self_device_time_total for e in events) / 1e3, 2),
                "top": [(e.key[:70], e.count, round(e.self_device_time_total / 1e3, 2)) for e in top]}
    except Exception as err:  # the profile is a detail: never lose the timings for it
        return {"error": repr(err)[:200]}


def measure(lm, batches, device, backend) -> dict:
    soft = soft_prompt(lm).requires_grad_(True)
    opt = torch.optim.AdamW([soft], lr=3e-2)
    ctx = (lambda: sdpa_kernel(backend)) if backend else nullcontext
    passes = []
    for _ in range(2):
        times = []
        for p, t in batches:
            with ctx():
                opt.zero_grad(set_to_none=True)
                sync(device)
                t0 = time.perf_counter()
                tuning_loss.target_loss_backward(lm, p, t, soft)
                opt.step()
                sync(device)
            times.append(round(time.perf_counter() - t0, 4))
        passes.append(times)
    with ctx():
        kernels = kernels_per_step(lm, *batches[0], soft, device)
    return {"first_pass_s": passes[0], "second_pass_s": passes[1],
            "median_first": statistics.median(passes[0]), "median_second": statistics.median(passes[1]),
            "kernels_per_step": kernels}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU (the code path only)")
    parser.add_argument("--json-out")
    args = parser.parse_args(argv)
    device = torch.device("cpu" if args.tiny else "cuda")
    tok = load_tokenizer()
    prompts = Prompts(tok, max_tokens=48 if args.tiny else None)
    p_all, t_all = prompts.tuning(BATCH * N_BATCHES)
    batches = [(p_all[k * BATCH:(k + 1) * BATCH], t_all[k * BATCH:(k + 1) * BATCH]) for k in range(N_BATCHES)]
    rows = []
    for name, shape in (TINY if args.tiny else SHAPES).items():
        for dtype in (torch.float32, torch.bfloat16):
            lm = loaded(build_model(shape, device, dtype), tok, name)
            for backend_name, backend in BACKENDS.items():
                row = {"shape": name, "dtype": str(dtype).removeprefix("torch."), "sdpa": backend_name,
                       "attn_implementation": getattr(lm.model.config, "_attn_implementation", None),
                       **measure(lm, batches, device, backend)}
                rows.append(row)
                print(json.dumps(row), flush=True)
            del lm
            if device.type == "cuda":
                torch.cuda.empty_cache()
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"device": torch.cuda.get_device_name() if device.type == "cuda"
                                                   else "cpu", "torch": torch.__version__, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
