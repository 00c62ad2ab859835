"""How fast a tuning step is against what the machine can do: model FLOPs and matmul peak. Only the
benchmarks use it (imported as ``perf`` beside them; tests/benchmarks/test_perf.py checks it).

``tune_mfu`` (bench_speed.py, gpu_check.py) is the achieved FLOP/s of a tuning
step, counted from the model's shape over the real (unpadded) tokens, divided by the FLOP/s of a
plain square matmul measured in the same process and dtype. Padding, the shared work of split
passes and anything that is not a matmul (norms, softmax, rotary, Python) count as time but not as
FLOPs, so the ratio says how close a step is to its floor.

Counted (multiply-add = 2 FLOPs): per layer the q/k/v/o projections and the gated MLP (gate, up,
down) on every token; causal attention (QK^T and PV, the lower triangle only: L(L+1)/2 pairs);
the vocabulary head at the positions that predict a target token. Tuning backpropagates to the
soft prompt only (no weight gradients): the backward of a frozen linear layer is one matmul (the
input gradient, 1x its forward), of attention four (dQ, dK, dV, dP: 2x its forward).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @classmethod
    def of(cls, config) -> Shape:
        """The shape of a (Llama-style) transformers config; multimodal configs use their text part."""
        cfg = getattr(config, "text_config", None) or config
        heads = int(cfg.num_attention_heads)
        return cls(hidden=int(cfg.hidden_size), layers=int(cfg.num_hidden_layers), heads=heads,
                   kv_heads=int(getattr(cfg, "num_key_value_heads", None) or heads),
                   head_dim=int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads),
                   intermediate=int(cfg.intermediate_size), vocab=int(cfg.vocab_size))

    @property
    def layer_params(self) -> int:
        """Weights of one layer's matmuls: q, k, v, o projections and gate, up, down."""
        h, d = self.hidden, self.head_dim
        return h * self.heads * d + 2 * h * self.kv_heads * d + self.heads * d * h + 3 * h * self.intermediate


def forward_flops(shape: Shape, tokens: int, head_positions: int) -> dict[str, float]:
    """FLOPs of one sequence of ``tokens`` real tokens through the model, the head on ``head_positions``."""
    linear = 2.0 * shape.layer_params * tokens * shape.layers
    attention = 2.0 * 2 * shape.heads * shape.head_dim * (tokens * (tokens + 1) / 2) * shape.layers
    head = 2.0 * shape.hidden * shape.vocab * head_positions
    return {"linear": linear, "attention": attention, "head": head}


def tuning_step_flops(shape: Shape, rows: Sequence[tuple[int, int]]) -> float:
    """FLOPs of one tuning step: forward + activation-only backward over ``rows`` of
    ``(tokens, targets)`` (tokens: soft prompt + prompt + target, unpadded)."""
    total = 0.0
    for tokens, targets in rows:
        f = forward_flops(shape, tokens, targets)
        total += 2 * f["linear"] + 3 * f["attention"] + 2 * f["head"]
    return total


def scoring_flops(shape: Shape, rows: Sequence[tuple[int, int]]) -> float:
    """FLOPs of scoring (forward only): ``rows`` of ``(prompt tokens, generated tokens)``; the head
    runs once per generated token (on the last prompt position, then on each new token)."""
    total = 0.0
    for prompt, new in rows:
        f = forward_flops(shape, prompt + max(new - 1, 0), max(new, 1))
        total += f["linear"] + f["attention"] + f["head"]
    return total


def matmul_peak(device="cpu", dtype=None, n: int | None = None, seconds: float = 0.5) -> float:
    """Measured FLOP/s of a square ``n x n`` matmul (best of repeated timings over ``seconds``):
    the floor a tuning step is compared with. Defaults: n=1024 on CPU, 8192 on CUDA."""
    import torch  # lazy: the FLOP counts above need no torch

    device = torch.device(device)
    dtype = dtype or torch.float32
    n = n or (8192 if device.type == "cuda" else 1024)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    torch.matmul(a, b)  # warm-up (kernel choice, oneDNN primitive creation)
    sync()
    best, spent = float("inf"), 0.0
    reps = 10 if device.type == "cuda" else 1
    while spent < seconds or best == float("inf"):
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.matmul(a, b)
        sync()
        dt = (time.perf_counter() - t0) / reps
        best, spent = min(best, dt), spent + dt * reps
    return 2.0 * n ** 3 / best
