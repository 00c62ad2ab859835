"""The tuning loop: it learns a format, is deterministic, stops on NaN, and resumes."""

import json
import math

import pytest
import torch
from tiny import format_task

from softeval import engine
from softeval.prompting import Prompter
from softeval.scoring import score_output
from softeval.tune import TuneConfig, batches, tune


def _format_rate(lm, prompter, items, soft):
    outs = engine.generate(lm, [prompter.ids(e, "soft-prompt") for e in items], soft=soft,
                           max_new_tokens=4, stop=("\n",))
    return sum(score_output(prompter.task, e, o)["format_ok"] for e, o in zip(items, outs)) / len(items)


def test_tuning_teaches_the_format(lm):
    task = format_task()
    splits = task.load()
    prompter = Prompter(lm, task, chat=False, shots=[])
    before = _format_rate(lm, prompter, splits.eval, None)
    result = tune(lm, prompter, splits.tune[8:], splits.tune[:8],
                  TuneConfig(num_tokens=8, steps=40, batch_size=8, lr=0.1, curve_every=10, curve_items=8))
    after = _format_rate(lm, prompter, splits.eval, result.soft.weight.detach())
    assert before <= 0.2
    assert after >= 0.9
    losses = [p["loss"] for p in result.curve if p["loss"] is not None]
    assert losses[-1] < losses[0]
    assert [p["step"] for p in result.curve if p["format_rate"] is not None] == [0, 10, 20, 30, 40]
    assert result.summary()["format_0.9_step"] is not None


def test_model_weights_get_no_gradients(lm):
    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    tune(lm, prompter, task.load().tune, [], TuneConfig(num_tokens=2, steps=2, curve_every=0))
    assert all(p.grad is None for p in lm.model.parameters())
    assert all(torch.equal(before[k], v) for k, v in lm.model.state_dict().items())


def test_same_seed_same_soft_prompt(lm):
    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    cfg = TuneConfig(num_tokens=3, steps=4, curve_every=0, seed=7)
    a = tune(lm, prompter, task.load().tune, [], cfg).soft.weight
    b = tune(lm, prompter, task.load().tune, [], cfg).soft.weight
    torch.testing.assert_close(a, b)


def test_nan_loss_stops_and_keeps_last_finite(lm, monkeypatch):
    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    real_loss = engine.target_loss
    calls = {"n": 0}

    def flaky(*args, **kw):
        calls["n"] += 1
        loss = real_loss(*args, **kw)
        return loss * float("nan") if calls["n"] == 3 else loss

    monkeypatch.setattr(engine, "target_loss", flaky)
    result = tune(lm, prompter, task.load().tune, [], TuneConfig(num_tokens=3, steps=6, curve_every=0))
    assert result.steps_run == 2
    assert "step 3" in result.stopped_early
    assert torch.isfinite(result.soft.weight).all()
    assert math.isfinite(result.final_loss)


def test_resume_from_checkpoint_matches_uninterrupted(lm, tmp_path):
    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    items = task.load().tune
    cfg = TuneConfig(num_tokens=3, steps=6, curve_every=3, curve_items=4)
    full = tune(lm, prompter, items[4:], items[:4], cfg)

    def interrupt(point):
        if point["step"] == 4:
            raise KeyboardInterrupt  # the checkpoint of step 3 (a curve point) is on disk

    with pytest.raises(KeyboardInterrupt):
        tune(lm, prompter, items[4:], items[:4], cfg, checkpoint=tmp_path, on_step=interrupt)
    saved = json.loads((tmp_path / "tune_state.json").read_text())  # JSON and safetensors, no pickle
    assert saved["step"] == 3 and saved["seconds"] > 0
    resumed = tune(lm, prompter, items[4:], items[:4], cfg, checkpoint=tmp_path)
    torch.testing.assert_close(resumed.soft.weight, full.soft.weight, rtol=0, atol=0)  # bit-identical
    assert [p["step"] for p in resumed.curve] == [p["step"] for p in full.curve]
    # The tuning time counts the interrupted process's time up to its checkpoint, and says it resumed.
    assert resumed.seconds > saved["seconds"] and resumed.summary()["resumed_at_steps"] == [3]
    assert full.summary()["resumed_at_steps"] == []


def test_batches_are_seeded_epochs():
    plan = batches(10, 4, 5, seed=1)
    assert plan == batches(10, 4, 5, seed=1) and plan != batches(10, 4, 5, seed=2)
    flat = [i for b in plan for i in b]
    assert sorted(flat[:10]) == list(range(10))  # every item once per epoch
