"""Few-row linear products as W @ x^T (softeval.lm.skinny): the same numbers as F.linear, only inside
the context, only on plain fp32 CPU linears, and the same generations as without it."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny import tiny_lm

from softeval.lm import generation, skinny


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(0, 40), lead=st.sampled_from([(), (1,), (2,)]), n_in=st.integers(1, 48),
       n_out=st.integers(1, 48), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_skinny_forward_equals_linear(rows, lead, n_in, n_out, bias, seed):
    torch.manual_seed(seed)
    layer = torch.nn.Linear(n_in, n_out, bias=bias)
    batch = lead[0] if lead else 1
    shape = (batch, rows // batch, n_in) if lead and rows % batch == 0 else (rows, n_in)
    x = torch.randn(*shape)
    got = skinny._skinny_forward(layer, x)
    want = F.linear(x, layer.weight, layer.bias)
    assert got.shape == want.shape
    assert got.is_contiguous()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_more_rows_than_the_limit_take_the_plain_path():
    layer = torch.nn.Linear(8, 5)
    x = torch.randn(skinny.SKINNY_ROWS + 1, 8)
    assert torch.equal(skinny._skinny_forward(layer, x), F.linear(x, layer.weight, layer.bias))


class Hooked(torch.nn.Linear):
    """A subclass with a forward of its own (as a quantized or LoRA layer has): never switched."""


def test_only_plain_fp32_cpu_linears_are_switched_and_all_are_restored(monkeypatch):
    monkeypatch.setattr(skinny, "ENABLED", True)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), Hooked(4, 4), torch.nn.Linear(4, 4).double(),
                                torch.nn.Linear(4, 4))
    replaced = model[3]
    replaced.forward = lambda x: x  # an offload hook's own forward: left alone
    with skinny.skinny_linears(model) as n:
        assert n == 1
        assert "forward" in vars(model[0]) and "forward" not in vars(model[1]) and "forward" not in vars(model[2])
    assert "forward" not in vars(model[0])
    assert vars(replaced)["forward"] is not None
    with pytest.raises(RuntimeError), skinny.skinny_linears(model):
        raise RuntimeError("a failure inside")
    assert "forward" not in vars(model[0])  # restored on the way out of a failure too


def test_disabled_switches_nothing(monkeypatch):
    monkeypatch.setattr(skinny, "ENABLED", False)
    with skinny.skinny_linears(torch.nn.Linear(4, 4)) as n:
        assert n == 0


def test_generations_and_first_logprobs_equal_the_plain_path(monkeypatch):
    monkeypatch.setattr(skinny, "ENABLED", True)
    lm = tiny_lm(seed=3, init_range=0.5)
    seqs = [lm.tokenizer(f"Q: {q}\nA:").input_ids for q in ("abc", "de fgh", "ijklm nop", "q", "rst uv wx")]

    def run():
        every = [list(range(lm.model.config.vocab_size))] * len(seqs)  # the whole first-step distribution
        gen = generation.generate(lm, seqs, max_new_tokens=12, batch_size=2, first_ids=every)
        return gen.texts, [torch.tensor(f) for f in gen.first_logprobs]

    fast, fast_first = run()
    monkeypatch.setattr(skinny, "ENABLED", False)
    plain, plain_first = run()
    assert fast == plain
    for i in range(len(seqs)):
        torch.testing.assert_close(fast_first[i], plain_first[i], rtol=1e-5, atol=1e-5)
    assert all("forward" not in vars(m) for m in lm.model.modules())  # nothing left switched


@pytest.mark.parametrize(("vendor", "forced", "on"), [("AuthenticAMD", None, True), ("GenuineIntel", None, False),
                                                     ("", None, False), ("GenuineIntel", True, True),
                                                     ("AuthenticAMD", False, False)])
def test_by_default_only_amd_cpus_take_the_few_row_path(monkeypatch, vendor, forced, on):
    """Measured faster on AMD (1.6-2.1x), slower on an Intel Xeon (0.63-0.83x): a fixed rule per host,
    which ENABLED overrides."""
    monkeypatch.setattr(skinny, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(skinny, "ENABLED", forced)
    with skinny.skinny_linears(torch.nn.Linear(4, 4)) as n:
        assert n == int(on)


def test_this_hosts_vendor_is_read():
    assert isinstance(skinny.cpu_vendor(), str)
