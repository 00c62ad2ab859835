"""benchmarks/perf.py's FLOP counting for tune_mfu, checked against a hand computation; bench_speed's
ratios over rounds."""

import torch
from benchscripts import load_benchmark
from transformers import LlamaConfig

perf = load_benchmark("perf")
Shape, forward_flops, matmul_peak = perf.Shape, perf.forward_flops, perf.matmul_peak
scoring_flops, tuning_step_flops = perf.scoring_flops, perf.tuning_step_flops


def _shape():
    # hidden 4, one layer, 2 heads of dim 2 (q and o: 4x4), one kv head (k and v: 4x2), MLP 4 -> 8, vocab 10
    cfg = LlamaConfig(hidden_size=4, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                      intermediate_size=8, vocab_size=10)
    return Shape.of(cfg)


def test_shape_from_config():
    s = _shape()
    assert (s.hidden, s.layers, s.heads, s.kv_heads, s.head_dim, s.intermediate, s.vocab) == (4, 1, 2, 1, 2, 8, 10)
    assert s.layer_params == 16 + 8 + 8 + 16 + 3 * 32  # q, k, v, o, gate/up/down


def test_tuning_step_flops_by_hand():
    s = _shape()
    # one row of 3 tokens, 1 target. Forward: linear 2*144*3 = 864; attention QK^T and PV over the
    # 6 causal pairs: 2 matmuls * 2 * 2 heads * 2 dims * 6 = 96; head 2*4*10*1 = 80.
    assert forward_flops(s, 3, 1) == {"linear": 864, "attention": 96, "head": 80}
    # backward to the inputs only: linear 1x, attention 2x, head 1x
    assert tuning_step_flops(s, [(3, 1)]) == 2 * 864 + 3 * 96 + 2 * 80 == 2176
    assert tuning_step_flops(s, [(3, 1), (3, 1)]) == 2 * 2176
    # scoring one new token after a 3-token prompt: one forward, the head on the last position
    assert scoring_flops(s, [(3, 1)]) == 864 + 96 + 80


def test_matmul_peak_is_positive_and_quick():
    peak = matmul_peak("cpu", torch.float32, n=64, seconds=0.01)
    assert peak > 0


def test_bench_ratio_spread_over_rounds():
    bench = load_benchmark("bench_speed")
    # per round: baseline seconds / softeval seconds, summed over the sections of that round
    parts = [{"t_softeval": [1.0, 2.0, 1.0], "t_lmeval": [2.0, 2.0, 3.0]},
             {"t_softeval": [1.0, 0.0, 1.0], "t_lmeval": [2.0, 1.0, 1.0]}]
    assert bench.round_ratios(parts) == [2.0, 1.5, 2.0]
    assert bench.spread([2.0, 1.5, 2.5]) == {"median": 2.0, "min": 1.5, "max": 2.5, "rounds": [2.0, 1.5, 2.5]}
