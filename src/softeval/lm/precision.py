"""The dtype tuning computes in (``--tune-dtype``), and the copy of the frozen model that computes in it.

``auto`` (the default) tunes in the dtype the run scores in (``--dtype``, the model as loaded): a soft prompt
tuned against bf16 activations and scored in fp32 scored worse. Measured on the main job (gemma-3-270m,
SQuAD, 40 items, 20 steps of 4) on one idle AMX host, seeds 0-2 side by side: the soft prompt's accuracy
0.20, 0.20, 0.20 after bf16 tuning against 0.28, 0.28, 0.38 after fp32 tuning, and the verdict
"the format was hiding knowledge" (p 0.0078, 0.0078, 0.0018) lost in all three (p 0.12, 0.062, 0.12;
BENCHMARKS.md "bf16 tuning"). ``--tune-dtype bfloat16`` still asks for bf16 tuning on an fp32 model, a
speed-up where the device multiplies bf16 fast (CUDA with bf16; CPUs with AMX: tuning 1.6-1.8x faster
there): its scores are then those of another recipe, and the run's identity says so. On a CPU without
bf16 arithmetic bf16 is far slower than fp32 (BENCHMARKS.md, "bf16 on CPU"); ``native_bf16`` says which
device computes it natively (torch's own AMX probe, else the processor's ``amx_bf16`` flag, never the
device's name), which ``make bench-bf16`` records beside its step times.

Only tuning's forward and backward change dtype. The soft prompt, its gradient and AdamW's state stay
fp32 (the soft prompt is cast where it is injected, and its gradient flows back through the cast), and
everything that is scored (zero-shot, few-shot, the curve's held-out slice, the tuned soft prompt)
runs on the model as loaded, in the run's dtype.

How: a copy of the frozen weights in the tuning dtype, made when tuning starts and dropped when it
ends, not autocast. Measured on SmolLM2-135M on an AMX host (BENCHMARKS.md, "bf16 tuning"): autocast
casts every weight again at every forward (and keeps its copies for the backward), and ran a step no
faster than fp32 (1.02x), the bf16 copy 2.4x faster. The copy costs memory: half the fp32 weights
while tuning runs (a 7B fp32 model: 14 GB more). A model loaded in bf16 (CUDA's default) tunes on its
own weights in bf16, with no copy.
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path

import torch

from softeval.lm.models import LoadedModel
from softeval.lm.settings import TUNE_DTYPES

NAMED = {"float32": torch.float32, "bfloat16": torch.bfloat16}
CPU_BF16_FLAGS = ("amx_bf16",)  # /proc/cpuinfo flags of fast bf16 arithmetic: AMX (not AVX512-BF16 alone)
# torch's own CPU probes (torch.cpu), used where this torch has them
CPU_BF16_PROBES = ("_is_amx_tile_supported",)
CPUINFO = Path("/proc/cpuinfo")
CPU_BF16_ENV = "SOFTEVAL_CPU_BF16"


def cpu_flags() -> set[str]:
    """The processor's flags (the first ``flags`` line of /proc/cpuinfo); empty where there is none."""
    try:
        text = CPUINFO.read_text(errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags") and ":" in line:
            return set(line.split(":", 1)[1].split())
    return set()


def cpu_bf16() -> bool:
    """Whether this CPU computes bf16 fast (AMX; AVX512-BF16 alone is not enough): torch's probe, else the flags;
    ``SOFTEVAL_CPU_BF16=0`` or ``1`` in the environment says it instead (a probe that is wrong on some
    host; the tests, which tune as on a CPU without bf16 unless they fake one)."""
    said = os.environ.get(CPU_BF16_ENV, "").strip()
    if said in ("0", "1"):
        return said == "1"
    return _probed_cpu_bf16()


@functools.cache
def _probed_cpu_bf16() -> bool:
    probes = [getattr(torch.cpu, name, None) for name in CPU_BF16_PROBES]
    probes = [probe for probe in probes if callable(probe)]
    if probes:
        return any(bool(probe()) for probe in probes)
    return bool(cpu_flags() & set(CPU_BF16_FLAGS))


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bf16 natively: CUDA as torch reports it, a CPU as ``cpu_bf16``."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type == "cpu":
        return cpu_bf16()
    return False


def tuning_dtype(choice: str, run_dtype: torch.dtype) -> torch.dtype:
    """The dtype tuning computes in: ``float32`` / ``bfloat16`` as named; ``auto``: the run's dtype (the
    model as loaded, what scoring computes in), whatever the device."""
    if choice in NAMED:
        return NAMED[choice]
    if choice != "auto":
        raise ValueError(f"unknown tuning dtype {choice!r}: use {', '.join(TUNE_DTYPES)}")
    return run_dtype


def for_tuning(lm: LoadedModel, choice: str) -> LoadedModel:
    """The model tuning computes with for ``--tune-dtype choice``: ``lm`` or its copy in the tuning dtype."""
    return tuning_model(lm, tuning_dtype(choice, model_dtype(lm)))


def model_dtype(lm: LoadedModel) -> torch.dtype:
    return lm.model.get_input_embeddings().weight.dtype


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tuning_model(lm: LoadedModel, dtype: torch.dtype) -> LoadedModel:
    """``lm`` itself when its weights are in ``dtype``; else a LoadedModel sharing its tokenizer whose
    model is a frozen copy with every floating parameter in ``dtype`` (tied weights stay tied; buffers
    are shared, not copied; parameters that train, a LoRA adapter's, are shared, so the copy tunes them).
    The copy is built parameter by parameter: no second full-precision copy is ever held."""
    if model_dtype(lm) == dtype:
        return lm
    memo = {}
    for param in lm.model.parameters():
        if param.requires_grad:  # what is tuned in the model (a LoRA adapter's A and B): shared, not copied
            memo[id(param)] = param
        elif id(param) not in memo:
            data = param.detach().to(dtype) if param.is_floating_point() else param.detach()
            memo[id(param)] = torch.nn.Parameter(data, requires_grad=False)
    for buffer in lm.model.buffers():
        memo[id(buffer)] = buffer
    model = copy.deepcopy(lm.model, memo)
    model.eval()
    if hasattr(model.config, "dtype"):
        model.config.dtype = dtype
    tuned = copy.copy(lm)
    tuned.model = model
    tuned.engine, tuned.engine_started = None, None
    return tuned
