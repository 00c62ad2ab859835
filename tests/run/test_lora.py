"""--method lora: a LoRA adapter tuned by the one tuning loop on the tiny model, scored like zero-shot with it on;
the model as loaded afterwards, resumable, saved in PEFT's format, refused where it cannot run."""

import json

import pytest
import torch
from interrupts import interrupted_after
from tiny import format_task, tiny_lm, toy_config

from softeval.constants import LORA_FOLDER
from softeval.errors import UserError
from softeval.lm import tuning_loss
from softeval.lm.lora import LoraAdapter, LoraSettings, attached
from softeval.run import pipeline
from softeval.run.prompting import Prompter
from softeval.run.tuning_loop import Kept, TuneConfig, TunedPart, tune

peft = pytest.importorskip("peft")

FAST = dict(steps=6, batch_size=8, lr=3e-2, curve_every=3, curve_items=4)


def _state(lm):
    return {k: v.clone() for k, v in lm.model.state_dict().items()}


def _same_model(lm, before):
    after = lm.model.state_dict()
    return set(after) == set(before) and all(torch.equal(before[k], after[k]) for k in before)


def test_the_adapter_learns_the_format_and_the_model_is_as_loaded_after(lm):
    task = format_task()
    splits = task.load()
    prompter = Prompter(lm, task, chat=False, shots=[])
    before = _state(lm)
    with attached(lm, LoraSettings(rank=4, alpha=8.0), seed=0) as adapter:
        result = tune(lm, prompter, splits.tune[8:], splits.tune[:8],
                      TuneConfig(steps=40, batch_size=8, lr=1e-2, curve_every=10, curve_items=8),
                      tuned=TunedPart(adapter))
        assert result.part is adapter and result.part.soft is None
        assert result.trainable_parameters == adapter.n_trainable() > 0
    formats = [p["format_rate"] for p in result.curve if p["format_rate"] is not None]
    assert formats[0] <= 0.2 and formats[-1] >= 0.9  # the random model never writes '#x'; the adapter learns it
    losses = [p["loss"] for p in result.curve if p["loss"] is not None]
    assert losses[-1] < losses[0]
    assert _same_model(lm, before)  # the frozen weights were never written, the adapter's layers are gone
    assert not any(p.requires_grad for p in lm.model.parameters())
    assert all(type(m).__module__.startswith(("torch", "transformers")) for m in lm.model.modules())


def test_a_later_method_in_the_same_job_scores_the_model_as_loaded(tmp_path, toy):
    both = pipeline.run_job(toy_config(tmp_path / "a", methods=("lora", "zero-shot"), lora_lr=1e-2, **FAST),
                            lm=tiny_lm())
    alone = pipeline.run_job(toy_config(tmp_path / "b", methods=("zero-shot",), **FAST), lm=tiny_lm())
    lora_run, after = both
    assert lora_run["method"] == "lora" and after["samples_sha256"] == alone[0]["samples_sha256"]
    assert lora_run["samples_sha256"] != after["samples_sha256"]  # the adapter changed what was generated


def test_a_lora_run_records_its_adapter_and_settings(tmp_path, toy):
    cfg = toy_config(tmp_path, methods=("lora",), lora_rank=2, lora_alpha=4.0, lora_lr=1e-2,
                     lora_targets="q_proj,v_proj", **FAST)
    [results] = pipeline.run_job(cfg, lm=tiny_lm())
    tuning = results["tuning"]
    assert tuning["lora"] == {"rank": 2, "alpha": 4.0, "dropout": 0.0, "targets": ["q_proj", "v_proj"]}
    assert tuning["lr"] == 1e-2 and tuning["steps_run"] >= 1 and tuning["seconds"] > 0
    # two layers x 2 targets x (A: 2 x 32, B: 2 x 32 for q, 2 x 16 for v: 2 key-value heads of 8)
    assert tuning["trainable_parameters"] == 2 * (2 * 32 + 32 * 2) + 2 * (2 * 32 + 16 * 2)
    assert "num_tokens" not in tuning and "init" not in tuning
    folder = pipeline.run_folder(cfg, "lora")[0].final
    meta = json.loads((folder / LORA_FOLDER / "softeval.json").read_text())
    assert meta["format_version"] == 1 and meta["trainable_parameters"] == tuning["trainable_parameters"]
    assert (folder / "curve.jsonl").is_file()
    # Its identity covers the LoRA settings: another rank is another run, refused without --force.
    with pytest.raises(UserError, match="lora_rank"):
        pipeline.run_job(toy_config(tmp_path, methods=("lora",), lora_rank=3, lora_alpha=4.0, lora_lr=1e-2,
                                    lora_targets="q_proj,v_proj", **FAST), lm=tiny_lm())


def test_the_saved_adapter_loads_with_peft_and_gives_the_same_logits(tmp_path):
    lm = tiny_lm()
    ids = torch.tensor([[1, 5, 9, 12, 30]])
    with attached(lm, LoraSettings(rank=4, alpha=8.0), seed=3) as adapter:
        with torch.no_grad():
            for name, p in adapter.trainable().items():
                p.add_(torch.randn_like(p) * 0.1)  # B is zero at the start: make the adapter do something
            mine = lm.model(input_ids=ids).logits
        adapter.save(tmp_path / "lora")
    with torch.no_grad():
        base = lm.model(input_ids=ids).logits
    assert not torch.allclose(mine, base)
    config = json.loads((tmp_path / "lora" / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 4 and config["base_model_name_or_path"] == lm.name
    loaded = peft.PeftModel.from_pretrained(tiny_lm().model, str(tmp_path / "lora"))
    with torch.no_grad():
        theirs = loaded(input_ids=ids).logits
    torch.testing.assert_close(theirs, mine)


def test_resume_after_a_kill_gives_the_same_adapter(tmp_path):
    task = format_task()
    items = task.load().tune
    cfg = TuneConfig(steps=6, batch_size=4, lr=3e-2, curve_every=3, curve_items=4)

    def tuned(checkpoint=None, on_step=None):
        lm = tiny_lm()  # a fresh process: the model as loaded, the adapter drawn again from its seed
        prompter = Prompter(lm, task, chat=False, shots=[])
        with attached(lm, LoraSettings(rank=2, alpha=4.0, dropout=0.1), seed=5) as adapter:
            result = tune(lm, prompter, items[4:], items[:4], cfg, Kept(checkpoint) if checkpoint else None, on_step,
                          TunedPart(adapter))
            return result, {k: v.detach().clone() for k, v in adapter.trainable().items()}

    full, full_weights = tuned()

    def kill(point):
        if point["step"] == 4:
            raise KeyboardInterrupt  # the checkpoint of step 3 is on disk

    with pytest.raises(KeyboardInterrupt):
        tuned(tmp_path, kill)
    saved = json.loads((tmp_path / "tune_state.json").read_text())
    assert saved["step"] == 3
    resumed, resumed_weights = tuned(tmp_path)
    assert resumed.summary()["resumed_at_steps"] == [3]
    assert resumed_weights.keys() == full_weights.keys()
    for name in full_weights:
        torch.testing.assert_close(resumed_weights[name], full_weights[name], rtol=0, atol=0)  # bit-identical


def test_an_interrupt_mid_backward_undoes_the_step_and_its_dropout_draws(tmp_path, monkeypatch):
    """A Ctrl-C at the end of step 5's backward (dropout has drawn from the RNG, the gradients are in): the
    checkpoint is of step 4 with the RNG as step 5 began, and the resumed adapter is bit-identical."""
    task = format_task()
    items = task.load().tune
    cfg = TuneConfig(steps=6, batch_size=4, lr=3e-2, curve_every=3, curve_items=4, early_stop=False)

    def tuned(checkpoint=None):
        lm = tiny_lm()
        with attached(lm, LoraSettings(rank=2, alpha=4.0, dropout=0.5), seed=5) as adapter:
            result = tune(lm, Prompter(lm, task, chat=False, shots=[]), items[4:], items[:4], cfg,
                          kept=Kept(checkpoint) if checkpoint else None, tuned=TunedPart(adapter))
            return result, {k: v.detach().clone() for k, v in adapter.trainable().items()}

    full, full_weights = tuned()
    with monkeypatch.context() as patched:
        patched.setattr(tuning_loss, "target_loss_backward", interrupted_after(tuning_loss.target_loss_backward, 5))
        with pytest.raises(KeyboardInterrupt):
            tuned(tmp_path)
    assert json.loads((tmp_path / "tune_state.json").read_text())["step"] == 4
    resumed, resumed_weights = tuned(tmp_path)
    assert resumed.summary()["resumed_at_steps"] == [4]
    for name in full_weights:
        torch.testing.assert_close(resumed_weights[name], full_weights[name], rtol=0, atol=0)


def test_the_adapter_tunes_through_the_copy_in_the_tuning_dtype(lm):
    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    before = _state(lm)
    with attached(lm, LoraSettings(rank=2, alpha=4.0), seed=0) as adapter:
        start = {k: v.detach().clone() for k, v in adapter.trainable().items()}
        result = tune(lm, prompter, task.load().tune, [], TuneConfig(steps=2, lr=1e-2, curve_every=0,
                                                                      tune_dtype="bfloat16"), tuned=TunedPart(adapter))
        assert result.config["tune_dtype_ran"] == "bfloat16"
        moved = [k for k, v in adapter.trainable().items() if not torch.equal(v, start[k])]
        assert moved and all(v.dtype == torch.float32 for v in adapter.trainable().values())
    assert _same_model(lm, before)


def test_an_unknown_target_layer_is_refused_and_leaves_the_model_as_loaded(lm):
    before = _state(lm)
    with pytest.raises(UserError, match="LoRA target layers qkv_fused: .*all-linear"):
        LoraAdapter(lm, LoraSettings(targets=("qkv_fused",)))
    assert _same_model(lm, before)
    assert all(type(m).__module__.startswith(("torch", "transformers")) for m in lm.model.modules())


def test_lora_on_vllm_and_without_peft_are_one_line_refusals_before_any_model_loads(tmp_path, toy, monkeypatch):
    def no_loading(config):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(pipeline, "load_lm", no_loading)
    with pytest.raises(UserError, match=r"^--backend vllm cannot score method lora: .*--backend hf$"):
        pipeline.run_job(toy_config(tmp_path, model="org/tiny", methods=("zero-shot", "lora"), backend="vllm"))
    monkeypatch.setitem(__import__("sys").modules, "peft", None)  # import peft now fails
    with pytest.raises(UserError, match=r"pip install 'softeval\[peft\]'"):
        pipeline.run_job(toy_config(tmp_path, model="org/tiny", methods=("lora",)))
    with pytest.raises(UserError, match="--lora-dropout must be between 0 and 0.99"):
        pipeline.run_job(toy_config(tmp_path, model="org/tiny", methods=("zero-shot",), lora_dropout=1.0))
    assert not any(tmp_path.rglob("*.partial"))


def test_a_lora_run_tunes_at_its_own_rate_and_epochs_count_passes_over_the_tuning_split(tmp_path):
    cfg = toy_config(tmp_path, lr=0.05, lora_lr=3e-4, steps=7, batch_size=8)
    assert TuneConfig.of(cfg, "soft-prompt", 100).lr == 0.05 and TuneConfig.of(cfg, "lora", 100).lr == 3e-4
    assert TuneConfig.of(cfg, "lora", 100).steps == 7  # no --epochs: --steps
    by_epochs = toy_config(tmp_path, epochs=2.5, batch_size=8)
    assert TuneConfig.of(by_epochs, "lora", 100).steps == 32  # ceil(2.5 * 100 / 8)
    assert TuneConfig.of(by_epochs, "soft-prompt", 3).steps == 1  # at least one step
    with pytest.raises(UserError, match="--epochs must be a positive finite number"):
        pipeline.run_job(toy_config(tmp_path, model="org/tiny", methods=("lora",), epochs=0.0))
