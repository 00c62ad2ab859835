"""Decoding on CPU: a linear layer applied to a few rows is computed as ``W @ x^T``.

At a decoding step every linear layer multiplies the batch's few live rows by a weight matrix that
does not fit in the CPU's caches, so the step is bound by reading the weights from memory. With
MKL on this project's CPU host (AMD EPYC, AVX2), ``F.linear`` (``x @ W^T``) on 2-16 rows streams
the weights at about 9 GB/s, the same product as ``W @ x^T`` at 13-18 GB/s: SmolLM2-135M's body
matmuls at 8 rows take 40 ms instead of 58, its vocabulary head 10 ms instead of 20 (BENCHMARKS.md,
"Decoding on CPU"). The products are the same; only the kernel's summation order differs (float
rounding, ~1e-6 relative), as it already does between batch sizes.

It pays only where MKL's few-row kernel is the slow one. On an Intel Xeon host (AVX512) the same
A/B (benchmarks/bench_skinny.py at 89d2c4e, SmolLM2-135M-Instruct, identical outputs) measured it slower:
GSM8K zero-shot 0.63x, 5-shot 0.83x, MMLU 1.09x. So by default it is on for AMD CPUs only (the
measured win: 1.6-2.1x on GSM8K zero-shot) and off elsewhere, a fixed rule per host (a per-process
timing could flip between runs and, with it, a greedy near-tie). ``ENABLED = True`` / ``False``
forces it (the benchmarks' A/B and ablation).

Used by ``generation.generate`` on CPU float32 weights only: GPUs' small-row kernels are not slow, and
other CPU dtypes are unmeasured.
"""

from __future__ import annotations

import functools
import platform
import types
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

ENABLED: bool | None = None  # None: on where it was measured to pay (pays_here); True / False force it
SKINNY_ROWS = 32  # at most this many rows take the W @ x^T path (measured faster for 2-32 rows)


def _skinny_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    rows = x.numel() // max(1, x.shape[-1])
    if rows > SKINNY_ROWS or rows == 0:
        return F.linear(x, self.weight, self.bias)
    out = (self.weight @ x.reshape(rows, x.shape[-1]).t()).t()
    if self.bias is not None:
        out = out + self.bias
    return out.contiguous().reshape(*x.shape[:-1], self.weight.shape[0])


@functools.cache
def cpu_vendor() -> str:
    """The CPU's vendor id (``AuthenticAMD``, ``GenuineIntel``; from /proc/cpuinfo on Linux), else the
    platform's processor string."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def pays_here() -> bool:
    """Whether this host is one where W @ x^T was measured faster than F.linear: AMD CPUs."""
    return cpu_vendor() == "AuthenticAMD"


def active() -> bool:
    return pays_here() if ENABLED is None else bool(ENABLED)


def eligible(module: torch.nn.Module) -> bool:
    """A plain ``nn.Linear`` (not a quantized or LoRA subclass with a forward of its own) with CPU
    float32 weights, whose forward no one else (an accelerate offload hook) has replaced."""
    return (type(module) is torch.nn.Linear and module.weight.device.type == "cpu"
            and module.weight.dtype == torch.float32 and "forward" not in vars(module))


@contextmanager
def skinny_linears(model: torch.nn.Module) -> Iterator[int]:
    """While inside: the model's eligible linear layers compute few-row products as ``W @ x^T``.
    Yields how many layers were switched; each gets its class's forward back on exit."""
    switched = [m for m in model.modules() if eligible(m)] if active() else []
    for m in switched:
        m.forward = types.MethodType(_skinny_forward, m)
    try:
        yield len(switched)
    finally:
        for m in switched:
            vars(m).pop("forward", None)
