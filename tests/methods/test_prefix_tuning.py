"""--method prefix-tuning: per-layer keys and values through the trained-part interface alone, on the tiny model:
the same logits as the prefix given to the model as a cache, learned by the one tuning loop, the model as loaded
afterwards, a run with its folder in PEFT's format, resumed bit-identically, refused where it cannot run."""

import json

import pytest
import torch
from tiny import format_task, tiny_lm, toy_config
from transformers import DynamicCache

from softeval.errors import UserError
from softeval.methods import maker_of
from softeval.methods.part import LAYER_PREFIX, TrainedPart
from softeval.methods.prefix_tuning import FOLDER, PrefixPart, not_attention
from softeval.run import pipeline
from softeval.run.config import COMMAND_LINE
from softeval.run.prompting import Prompter
from softeval.run.tuning_loop import Kept, TuneConfig, TunedPart, tune

FAST = dict(steps=6, batch_size=8, lr=3e-2, curve_every=3, curve_items=4)


def _attached(lm, tokens=3, seed=0, **kw):
    return maker_of("prefix-tuning").attached(lm, toy_config("unused", tokens=tokens, seed=seed, **kw),
                                              "prefix-tuning", "", COMMAND_LINE)


def _state(lm):
    return {k: v.clone() for k, v in lm.model.state_dict().items()}


def test_the_prefix_is_a_trained_part_whose_logits_are_the_cache_s():
    """The attention function gives the logits of the model read with the prefix as its past keys and values."""
    lm = tiny_lm()
    ids = torch.tensor([[1, 5, 9, 12, 30]])
    with _attached(lm, tokens=4) as part:
        assert isinstance(part, TrainedPart) and part.enters == LAYER_PREFIX and part.soft is None
        with torch.no_grad():
            part.weight.add_(torch.randn_like(part.weight) * 0.3)
            mine = lm.model(input_ids=ids).logits
        cache = DynamicCache(config=lm.model.config)
        for i in range(part.layers):
            k, v = part.layer(i, torch.float32)
            cache.update(k.detach(), v.detach(), i)
    with torch.no_grad():
        base = lm.model(input_ids=ids).logits
        theirs = lm.model(input_ids=ids, past_key_values=cache, attention_mask=torch.ones(1, 4 + 5, dtype=torch.long),
                          position_ids=torch.arange(5)[None]).logits
    torch.testing.assert_close(mine, theirs)
    assert not torch.allclose(mine, base)


def test_a_padded_row_scores_as_the_row_alone():
    lm = tiny_lm()
    with _attached(lm, tokens=2), torch.no_grad():
        alone = lm.model(input_ids=torch.tensor([[3, 4, 5]])).logits
        padded = lm.model(input_ids=torch.tensor([[0, 0, 3, 4, 5]]), attention_mask=torch.tensor([[0, 0, 1, 1, 1]]),
                          position_ids=torch.tensor([[0, 0, 0, 1, 2]])).logits
    torch.testing.assert_close(padded[0, 2:], alone[0])


def test_the_prefix_learns_and_the_model_is_as_loaded_after():
    lm = tiny_lm()
    task = format_task()
    splits = task.load()
    prompter = Prompter(lm, task, chat=False, shots=[])
    before = _state(lm)
    with _attached(lm, tokens=4) as part:
        result = tune(lm, prompter, splits.tune[8:], splits.tune[:8],
                      TuneConfig(steps=20, batch_size=8, lr=0.3, curve_every=10, curve_items=8),
                      tuned=TunedPart(part))
        assert result.part is part and result.trainable_parameters == part.weight.numel() == 4 * 2 * 2 * 2 * 8
    held = [p["held_out_loss"] for p in result.curve if p.get("held_out_loss") is not None]
    # on the 2-layer random model the prefix learns the format more slowly than a soft prompt or LoRA (5.9 -> 4.1 in
    # 20 steps, where format_rate is still 0): its loss falls, on the tuning batches and on the held-out slice
    assert held[-1] < 0.8 * held[0] and result.final_loss < 0.8 * result.curve[1]["loss"]
    with torch.no_grad():
        after = lm.model(input_ids=torch.tensor([[1, 2, 3]])).logits
        fresh = tiny_lm().model(input_ids=torch.tensor([[1, 2, 3]])).logits
    torch.testing.assert_close(after, fresh)  # the model's own attention back
    assert all(torch.equal(before[k], v) for k, v in lm.model.state_dict().items())


def test_a_run_records_the_prefix_and_saves_it_in_peft_s_format(tmp_path, toy):
    cfg = toy_config(tmp_path, methods=("prefix-tuning", "zero-shot"), tokens=3, **FAST)
    prefix_run, zero = pipeline.run_job(cfg, lm=tiny_lm())
    alone = pipeline.run_job(toy_config(tmp_path / "b", methods=("zero-shot",), **FAST), lm=tiny_lm())
    assert zero["samples_sha256"] == alone[0]["samples_sha256"]  # the next method scores the model as loaded
    tuning = prefix_run["tuning"]
    assert tuning["prefix"] == {"num_virtual_tokens": 3, "layers": 2, "kv_heads": 2, "head_dim": 8,
                                "init": "vocab activations"}
    assert "init" not in tuning and tuning["trainable_parameters"] == 3 * 2 * 2 * 2 * 8
    folder = pipeline.run_folder(cfg, "prefix-tuning")[0].final / FOLDER
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["peft_type"] == "PREFIX_TUNING" and config["num_virtual_tokens"] == 3
    assert config["num_layers"] * 2 * config["token_dim"] == 2 * 2 * 16


def test_peft_reads_the_saved_prefix_as_its_own(tmp_path):
    peft = pytest.importorskip("peft")
    lm = tiny_lm()
    with _attached(lm, tokens=3) as part:
        part.save(tmp_path, lm, {"task": "t"})
        saved = part.weight.detach().clone()
    loaded = peft.PeftModel.from_pretrained(tiny_lm().model, str(tmp_path))
    theirs = loaded.get_prompt_embedding_to_save("default")
    torch.testing.assert_close(theirs, saved)
    pkv = loaded.get_prompt(batch_size=1)  # PEFT's per-layer keys and values of it
    k0 = pkv.layers[0].keys if hasattr(pkv, "layers") else pkv[0][0]
    torch.testing.assert_close(k0, PrefixPart(saved, 2, 2, 8, "m").layer(0, torch.float32)[0])


def test_resume_after_a_kill_gives_the_same_prefix(tmp_path):
    task = format_task()
    items = task.load().tune
    cfg = TuneConfig(steps=6, batch_size=4, lr=3e-2, curve_every=3, curve_items=4)

    def tuned(checkpoint=None, on_step=None):
        lm = tiny_lm()
        with _attached(lm, tokens=2, seed=5) as part:
            tune(lm, Prompter(lm, task, chat=False, shots=[]), items[4:], items[:4], cfg,
                 Kept(checkpoint) if checkpoint else None, on_step, TunedPart(part))
            return part.weight.detach().clone()

    full = tuned()

    def kill(point):
        if point["step"] == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tuned(tmp_path, kill)
    torch.testing.assert_close(tuned(tmp_path), full, rtol=0, atol=0)


def test_a_model_without_attention_layers_is_refused_before_it_loads(tmp_path):
    folder = tmp_path / "mamba"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(UserError, match="recurrent state"):
        maker_of("prefix-tuning").check(toy_config(tmp_path, model=str(folder)), COMMAND_LINE)
    assert not_attention({"text_config": {"layer_types": ["full_attention", "linear_attention"]}})
    assert not_attention({"model_type": "llama", "layer_types": ["full_attention", "sliding_attention"]}) is None


def test_vllm_cannot_take_a_prefix_in_the_model(tmp_path):
    from softeval.run.validate import check_backend

    with pytest.raises(UserError, match="cannot score method prefix-tuning"):
        check_backend(toy_config(tmp_path, methods=("prefix-tuning",), backend="vllm"), on_device=False)
