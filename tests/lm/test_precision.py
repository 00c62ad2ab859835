"""Tuning's dtype (lm/precision.py): chosen by the device's probed capability, a bf16 copy of the frozen
weights for tuning only, the soft prompt and AdamW's state in fp32, scoring untouched."""

import io
import json

import pytest
import torch
from rich.console import Console
from tiny import format_task, tiny_lm, toy_config

from softeval.lm import precision
from softeval.run.pipeline import run_job
from softeval.run.prompting import Prompter
from softeval.run.tuning_loop import TuneConfig, tune

CPU = torch.device("cpu")


@pytest.fixture
def probed(monkeypatch):
    """The CPU capability as probed (the tests' SOFTEVAL_CPU_BF16=0 removed), probes faked per test."""
    monkeypatch.delenv(precision.CPU_BF16_ENV, raising=False)
    probe = precision._probed_cpu_bf16
    probe.cache_clear()
    yield monkeypatch
    probe.cache_clear()


@pytest.mark.parametrize("avx512_bf16, amx, native", [(False, False, False), (True, False, False),
                                                       (False, True, True), (True, True, True)])
def test_cpu_capability_comes_from_torchs_amx_probe(probed, avx512_bf16, amx, native):
    probed.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
    probed.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    probed.setattr(precision, "cpu_flags", lambda *a: pytest.fail("flags read although torch has probes"))
    assert precision.native_bf16(CPU) is native


@pytest.mark.parametrize("flags, native", [("fpu avx2 avx512f", False), ("fpu avx512f avx512_bf16", False),
                                           ("fpu avx512f avx512_bf16 avx512_fp16", False),
                                           ("fpu amx_tile amx_bf16", True), ("fpu avx512_bf16 amx_tile amx_bf16", True),
                                           ("", False)])
def test_without_torchs_probes_the_cpu_flags_decide(probed, tmp_path, flags, native):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: Some CPU bf16 Edition\nflags\t\t: {flags}\n\nflags\t: amx_bf16\n"
                    if flags else "processor\t: 0\n")
    probed.setattr(precision, "CPU_BF16_PROBES", ())
    probed.setattr(precision, "CPUINFO", info)
    assert precision.native_bf16(CPU) is native  # the first flags line; never the model name


def test_the_environment_overrides_the_probe(probed):
    probed.setattr(precision, "_probed_cpu_bf16", lambda: True)
    probed.setenv(precision.CPU_BF16_ENV, "0")
    assert not precision.native_bf16(CPU)
    probed.setattr(precision, "_probed_cpu_bf16", lambda: False)
    probed.setenv(precision.CPU_BF16_ENV, "1")
    assert precision.native_bf16(CPU)


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("run_dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_tuning_dtype_per_choice_and_capability(monkeypatch, native, run_dtype):
    monkeypatch.setattr(precision, "cpu_bf16", lambda: native)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: native)
    # auto tunes in what the run scores in, whatever the device computes fast: bf16 tuning scored worse
    assert precision.tuning_dtype("auto", run_dtype) == run_dtype
    assert precision.tuning_dtype("float32", run_dtype) == torch.float32
    assert precision.tuning_dtype("bfloat16", run_dtype) == torch.bfloat16
    with pytest.raises(ValueError, match="float16"):
        precision.tuning_dtype("float16", run_dtype)


def test_the_bf16_copy_is_frozen_tied_and_leaves_the_model_alone():
    lm = tiny_lm()
    lm.model.config.tie_word_embeddings = True
    lm.model.tie_weights()
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    copy = precision.tuning_model(lm, torch.bfloat16)
    assert precision.tuning_model(lm, torch.float32) is lm  # already in that dtype: no copy
    params = list(copy.model.parameters())
    assert {p.dtype for p in params} == {torch.bfloat16} and not any(p.requires_grad for p in params)
    assert copy.model.get_output_embeddings().weight is copy.model.get_input_embeddings().weight
    assert copy.tokenizer is lm.tokenizer and copy.pad_id == lm.pad_id
    for name, value in lm.model.state_dict().items():
        assert value.dtype == torch.float32 and torch.equal(value, before[name]), name
    assert torch.equal(copy.model.get_input_embeddings().weight,
                       lm.model.get_input_embeddings().weight.to(torch.bfloat16))


def test_bf16_tuning_keeps_the_soft_prompt_its_gradient_and_adamw_state_fp32(monkeypatch):
    lm = tiny_lm()
    task = format_task()
    splits = task.load()
    prompter = Prompter(lm, task, chat=False, shots=[])
    seen = {}
    step = torch.optim.AdamW.step

    def spying_step(self, *args, **kwargs):
        param = self.param_groups[0]["params"][0]
        seen["weight"], seen["grad"] = param.dtype, param.grad.dtype
        out = step(self, *args, **kwargs)
        seen["state"] = {k: v.dtype for k, v in self.state[param].items() if k != "step"}
        return out

    from softeval.lm import tuning_loss
    backward = tuning_loss.target_loss_backward

    def spying_backward(model_lm, *args, **kwargs):
        seen["tuned_on"] = precision.model_dtype(model_lm)
        return backward(model_lm, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", spying_step)
    monkeypatch.setattr(tuning_loss, "target_loss_backward", spying_backward)
    result = tune(lm, prompter, splits.tune[8:], splits.tune[:8],
                  TuneConfig(num_tokens=4, steps=3, batch_size=4, lr=0.1, curve_every=3, curve_items=4,
                             tune_dtype="bfloat16"))
    assert seen["tuned_on"] == torch.bfloat16
    assert seen["weight"] == seen["grad"] == torch.float32
    assert set(seen["state"].values()) == {torch.float32} and set(seen["state"]) == {"exp_avg", "exp_avg_sq"}
    assert result.part.weight.dtype == torch.float32 and torch.isfinite(result.part.weight).all()
    assert result.summary()["tune_dtype_ran"] == "bfloat16" and result.summary()["tune_dtype"] == "bfloat16"
    assert precision.model_dtype(lm) == torch.float32


def test_auto_tunes_in_the_runs_dtype_even_where_the_device_computes_bf16(monkeypatch):
    lm = tiny_lm()
    task = format_task()
    splits = task.load()
    prompter = Prompter(lm, task, chat=False, shots=[])
    config = TuneConfig(num_tokens=4, steps=1, batch_size=4, curve_items=0)
    ran = {}
    for native in (False, True):
        monkeypatch.setattr(precision, "cpu_bf16", lambda native=native: native)
        ran[native] = tune(lm, prompter, splits.tune, [], config).summary()["tune_dtype_ran"]
    assert ran == {False: "float32", True: "float32"}


def _samples(out, method):
    folder = out / "tiny-0" / "toyformat" / method / "seed0"
    return (folder / "samples.jsonl").read_bytes(), json.loads((folder / "results.json").read_text())


def test_zero_and_few_shot_outputs_are_identical_whatever_tune_dtype_says(toy, tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "cpu_bf16", lambda: True)
    results = {}
    for choice in ("float32", "bfloat16", "auto"):
        out = tmp_path / choice
        run_job(toy_config(out, tune_dtype=choice), console=Console(file=io.StringIO()), lm=tiny_lm())
        results[choice] = {m: _samples(out, m) for m in ("zero-shot", "few-shot", "soft-prompt")}
    for method in ("zero-shot", "few-shot"):
        texts = {choice: got[method][0] for choice, got in results.items()}
        assert len(set(texts.values())) == 1, method
    ran = {choice: got["soft-prompt"][1]["tuning"]["tune_dtype_ran"] for choice, got in results.items()}
    assert ran == {"float32": "float32", "bfloat16": "bfloat16", "auto": "float32"}
    assert {got["soft-prompt"][1]["config"]["tune_dtype"] for got in results.values()} == set(results)
