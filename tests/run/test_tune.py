"""The tuning loop: it learns a format, is deterministic, stops on NaN, and resumes."""

import dataclasses
import json
import math
import os
import signal

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from interrupts import interrupted_after
from tiny import format_task

from softeval.lm import generation, tuning_loss
from softeval.run import tuning_loop as tune_module
from softeval.run.prompting import Prompter
from softeval.run.scoring import score_output
from softeval.run.tuning_loop import Kept, TuneConfig, batches, lr_at, tune


@pytest.fixture(autouse=True)
def _sigint_as_an_interactive_python_has_it():
    """The signal tests send SIGINT as Ctrl-C would. A process started in the background (``make test &``, nohup)
    inherits SIGINT ignored, and Python then installs no handler of its own: the held step (run/interrupts.py) keeps
    the ignore, so no KeyboardInterrupt comes. Each test runs with Python's own handler, as in a terminal."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def _format_rate(lm, prompter, items, soft):
    outs = generation.generate(lm, [prompter.ids(e, "soft-prompt") for e in items], soft=soft,
                               max_new_tokens=4, stop=("\n",)).texts
    return sum(score_output(prompter.task, e, o)["format_ok"] for e, o in zip(items, outs)) / len(items)


def test_tuning_teaches_the_format(lm):
    task = format_task()
    splits = task.load()
    prompter = Prompter(lm, task, chat=False, shots=[])
    before = _format_rate(lm, prompter, splits.eval, None)
    result = tune(lm, prompter, splits.tune[8:], splits.tune[:8],
                  TuneConfig(num_tokens=8, steps=40, batch_size=8, lr=0.1, curve_every=10, curve_items=8))
    after = _format_rate(lm, prompter, splits.eval, result.part.weight.detach())
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
    a = tune(lm, prompter, task.load().tune, [], cfg).part.weight
    b = tune(lm, prompter, task.load().tune, [], cfg).part.weight
    torch.testing.assert_close(a, b)


def test_nan_loss_stops_and_keeps_last_finite(lm, monkeypatch):
    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    real_loss = tuning_loss.target_loss
    calls = {"n": 0}

    def flaky(*args, **kw):
        calls["n"] += 1
        loss = real_loss(*args, **kw)
        return loss * float("nan") if calls["n"] == 3 else loss

    monkeypatch.setattr(tuning_loss, "target_loss", flaky)
    result = tune(lm, prompter, task.load().tune, [], TuneConfig(num_tokens=3, steps=6, curve_every=0))
    assert result.steps_run == 2
    assert "step 3" in result.stopped_early
    assert torch.isfinite(result.part.weight).all()
    assert math.isfinite(result.final_loss)


@pytest.mark.parametrize("schedule", ["constant", "linear"])
def test_resume_from_checkpoint_matches_uninterrupted(lm, tmp_path, schedule):
    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    items = task.load().tune
    cfg = TuneConfig(num_tokens=3, steps=6, curve_every=3, curve_items=4, lr_schedule=schedule)
    full = tune(lm, prompter, items[4:], items[:4], cfg)

    def interrupt(point):
        if point["step"] == 4:
            raise KeyboardInterrupt  # the checkpoint of step 3 (a curve point) is on disk

    with pytest.raises(KeyboardInterrupt):
        tune(lm, prompter, items[4:], items[:4], cfg, Kept(tmp_path), on_step=interrupt)
    saved = json.loads((tmp_path / "tune_state.json").read_text())  # JSON and safetensors, no pickle
    assert saved["step"] == 3 and saved["seconds"] > 0
    resumed = tune(lm, prompter, items[4:], items[:4], cfg, Kept(tmp_path))
    torch.testing.assert_close(resumed.part.weight, full.part.weight, rtol=0, atol=0)  # bit-identical
    assert [p["step"] for p in resumed.curve] == [p["step"] for p in full.curve]
    # The tuning time counts the interrupted process's time up to its checkpoint, and says it resumed.
    assert resumed.seconds > saved["seconds"] and resumed.summary()["resumed_at_steps"] == [3]
    assert full.summary()["resumed_at_steps"] == []


def test_a_kill_before_the_first_step_keeps_the_first_curve_point(lm, tmp_path, monkeypatch):
    """The step-0 point generates on every held-out item (minutes on GSM8K or MATH): a run killed before
    its first curve point after it resumes without computing it again, bit-identical."""
    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    items = task.load().tune
    cfg = TuneConfig(num_tokens=3, steps=6, curve_every=3, curve_items=4)
    full = tune(lm, prompter, items[4:], items[:4], cfg)

    def interrupt(point):
        raise KeyboardInterrupt  # at step 1: only the step-0 point is on disk

    with pytest.raises(KeyboardInterrupt):
        tune(lm, prompter, items[4:], items[:4], cfg, Kept(tmp_path), on_step=interrupt)
    saved = json.loads((tmp_path / "tune_state.json").read_text())
    assert saved["step"] == 0 and [p["step"] for p in saved["curve"]] == [0]
    points = []
    real = tune_module.curve_point
    monkeypatch.setattr(tune_module, "curve_point", lambda *a, **kw: points.append(1) or real(*a, **kw))
    resumed = tune(lm, prompter, items[4:], items[:4], cfg, Kept(tmp_path))
    assert len(points) == 2  # steps 3 and 6; step 0 came from the checkpoint
    torch.testing.assert_close(resumed.part.weight, full.part.weight, rtol=0, atol=0)

    def seen(curve):
        return [(p["step"], p["format_rate"], p["accuracy"]) for p in curve]

    assert seen(resumed.curve) == seen(full.curve) and resumed.summary()["resumed_at_steps"] == [0]


@pytest.mark.parametrize("where, kept_step", [("backward", 4), ("curve point", 3)])
def test_an_interrupt_mid_step_keeps_every_whole_step_and_resumes_bit_identical(lm, tmp_path, monkeypatch, where,
                                                                               kept_step):
    """A KeyboardInterrupt raised in the middle of step 5's backward (a stop at once) keeps step 4, the last whole
    one; one while step 3's curve point is scored (after AdamW has updated the soft prompt) keeps step 3 with its
    point left to score, which the resumed run scores first. The resumed run ends where an uninterrupted one does."""
    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    items = task.load().tune
    cfg = TuneConfig(num_tokens=3, steps=6, curve_every=3, curve_items=4, early_stop=False)
    full = tune(lm, prompter, items[4:], items[:4], cfg)
    with monkeypatch.context() as patched:
        if where == "backward":
            patched.setattr(tuning_loss, "target_loss_backward", interrupted_after(tuning_loss.target_loss_backward, 5))
        else:  # the step-0 point is the first call, step 3's the second
            patched.setattr(tune_module, "curve_point", interrupted_after(tune_module.curve_point, 2))
        with pytest.raises(KeyboardInterrupt):
            tune(lm, prompter, items[4:], items[:4], cfg, Kept(tmp_path))
    saved = json.loads((tmp_path / "tune_state.json").read_text())
    assert saved["step"] == kept_step and [p["step"] for p in saved["curve"]] == list(range(kept_step + 1))
    assert saved.get("score_pending", False) == (where == "curve point")
    resumed = tune(lm, prompter, items[4:], items[:4], cfg, Kept(tmp_path))
    assert resumed.summary()["resumed_at_steps"] == [kept_step]
    torch.testing.assert_close(resumed.part.weight, full.part.weight, rtol=0, atol=0)
    assert _seen(resumed.curve) == _seen(full.curve)


def _seen(curve: list[dict]) -> list[tuple]:
    return [(p["step"], p["loss"], p["format_rate"], p["accuracy"], p.get("held_out_loss")) for p in curve]


def _signal_setup(lm) -> tuple:
    """The signal tests' tuning: the toy format task, 6 steps with a curve point every 3; the uninterrupted run
    (``full``) to compare the resumed one with; ``real``, the loss the signalled stand-in calls, and ``calls``."""
    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    items = task.load().tune
    cfg = TuneConfig(num_tokens=3, steps=6, curve_every=3, curve_items=4, early_stop=False)
    full = tune(lm, prompter, items[4:], items[:4], cfg)
    return prompter, items, cfg, full, tuning_loss.target_loss_backward, []


@pytest.mark.parametrize("sig, raised", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, KeyboardInterrupt),
                                         (signal.SIGTERM, SystemExit)])  # SystemExit: a Ray worker's handler
@pytest.mark.parametrize("at_call", [2, 5])  # step 2's backward; step 5's (after the curve point of step 3)
def test_a_signal_mid_step_finishes_the_step_keeps_it_and_resumes_bit_identical(lm, tmp_path, monkeypatch, sig,
                                                                                raised, at_call, capfd):
    """A real SIGINT or SIGTERM in the middle of a step's backward is held: the step finishes, is checkpointed, and
    tuning stops with the signal's own exception (KeyboardInterrupt; the command line's Terminated for SIGTERM).
    The checkpoint's step is the steps done (none lost) and the resumed run is bit-identical to an uninterrupted
    one."""

    class Stopped(raised):
        pass

    def stop(signum, frame):
        raise Stopped  # stands in for the command line's SIGTERM handler (softeval.cli.app), or a Ray worker's

    prompter, items, cfg, full, real, calls = _signal_setup(lm)

    def signalled(*args, **kw):
        calls.append(1)
        if len(calls) == at_call:
            os.kill(os.getpid(), sig)  # delivered here, in the middle of the step
        return real(*args, **kw)

    before = signal.signal(signal.SIGTERM, stop)
    try:
        with monkeypatch.context() as patched:
            patched.setattr(tuning_loss, "target_loss_backward", signalled)
            with pytest.raises(Stopped if sig == signal.SIGTERM else KeyboardInterrupt):  # the handler's own
                tune(lm, prompter, items[4:], items[:4], cfg, Kept(tmp_path))
        assert signal.getsignal(signal.SIGTERM) is stop  # the handlers before are put back
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, before)
    assert "stopping once this tuning step is done" in capfd.readouterr().err
    saved = json.loads((tmp_path / "tune_state.json").read_text())
    assert saved["step"] == at_call == len(calls) and not saved.get("score_pending")  # every step done is kept
    resumed = tune(lm, prompter, items[4:], items[:4], cfg, Kept(tmp_path))
    assert resumed.summary()["resumed_at_steps"] == [at_call]
    torch.testing.assert_close(resumed.part.weight, full.part.weight, rtol=0, atol=0)
    assert _seen(resumed.curve) == _seen(full.curve)


def test_a_second_signal_during_a_held_step_stops_at_once_undoing_it(lm, tmp_path, monkeypatch, capfd):
    """Ctrl-C twice in step 2's backward: the first is held, the second stops at once; step 2 is undone, step 1
    (the last whole one) kept, and the resumed run repeats step 2 and ends bit-identical."""
    prompter, items, cfg, full, real, calls = _signal_setup(lm)

    def signalled(*args, **kw):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)  # held
            os.kill(os.getpid(), signal.SIGINT)  # raised here
        return real(*args, **kw)

    with monkeypatch.context() as patched:
        patched.setattr(tuning_loss, "target_loss_backward", signalled)
        with pytest.raises(KeyboardInterrupt):
            tune(lm, prompter, items[4:], items[:4], cfg, Kept(tmp_path))
    assert "stopping once this tuning step is done" in capfd.readouterr().err
    saved = json.loads((tmp_path / "tune_state.json").read_text())
    assert saved["step"] == 1 and not saved.get("score_pending")
    resumed = tune(lm, prompter, items[4:], items[:4], cfg, Kept(tmp_path))
    assert resumed.summary()["resumed_at_steps"] == [1]
    torch.testing.assert_close(resumed.part.weight, full.part.weight, rtol=0, atol=0)
    assert _seen(resumed.curve) == _seen(full.curve)


def test_a_signal_held_at_a_curve_step_keeps_it_with_its_point_to_score(lm, tmp_path, monkeypatch):
    """A signal during step 3's update (a curve step) stops before its held-out scoring (minutes on worked
    solutions): step 3 is kept with its point to score; the resumed run scores it first, bit-identical."""
    prompter, items, cfg, full, real, calls = _signal_setup(lm)

    def signalled(*args, **kw):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kw)

    with monkeypatch.context() as patched:
        patched.setattr(tuning_loss, "target_loss_backward", signalled)
        with pytest.raises(KeyboardInterrupt):
            tune(lm, prompter, items[4:], items[:4], cfg, Kept(tmp_path))
    saved = json.loads((tmp_path / "tune_state.json").read_text())
    assert saved["step"] == 3 and saved["score_pending"] is True and saved["curve"][-1]["format_rate"] is None
    resumed = tune(lm, prompter, items[4:], items[:4], cfg, Kept(tmp_path))
    torch.testing.assert_close(resumed.part.weight, full.part.weight, rtol=0, atol=0)
    assert _seen(resumed.curve) == _seen(full.curve)


def test_batches_are_seeded_epochs():
    plan = batches(10, 4, 5, seed=1)
    assert plan == batches(10, 4, 5, seed=1) and plan != batches(10, 4, 5, seed=2)
    flat = [i for b in plan for i in b]
    assert sorted(flat[:10]) == list(range(10))  # every item once per epoch


def _pt(step, loss, fmt):
    return {"step": step, "loss": None, "format_rate": fmt, "accuracy": 0.0, "held_out_loss": loss}


def test_plateau_needs_two_points_after_step_zero_and_no_progress():
    from softeval.run.tuning_loop import plateau

    flat = [_pt(0, 2.0, 0.0), _pt(10, 1.0, 1.0), _pt(20, 0.995, 1.0)]
    assert not plateau(flat[:2], 16)  # step 10 is too early, whatever it shows
    assert plateau(flat, 16)  # loss within 1% of the best earlier point, format unchanged
    assert not plateau(flat[:2] + [_pt(20, 0.98, 1.0)], 16)  # 2% lower: still learning
    assert not plateau(flat[:2] + [_pt(20, 1.0, 0.5)], 16)  # format moved by more than one item
    assert plateau(flat[:2] + [_pt(20, 1.0, 1 - 1 / 16)], 16)  # one item is noise
    assert not plateau([{**p, "held_out_loss": None} for p in flat], 16)  # no held-out loss: never
    # A format still below FOLLOWS_FORMAT is never a plateau, however flat the loss and the format
    # (GSM8K on SmolLM2 had stopped at step 30 with the held-out format at 0.00, 0.06, 0.06, 0.12).
    slow = [_pt(0, 1.31, 0.0), _pt(10, 1.24, 1 / 16), _pt(20, 1.24, 1 / 16), _pt(30, 1.24, 2 / 16)]
    assert not plateau(slow, 16) and not plateau(slow[:3], 16)
    assert not plateau(flat[:2] + [_pt(20, 0.995, 0.875)], 16)  # 0.875 < 0.90: the format is not reached
    assert plateau(flat[:2] + [_pt(20, 0.995, 0.9375)], 16)


def test_early_stop_records_its_step_and_equals_the_full_run_up_to_it(lm):
    # Every output counts as formatted, so the flat held-out slice follows the format: early stop may fire.
    task = dataclasses.replace(format_task(), strict=lambda out, ex: "x")
    prompter = Prompter(lm, task, chat=False, shots=[])
    items = task.load().tune
    # A learning rate too small to move anything: the held-out slice is flat from the start.
    base = dict(num_tokens=4, steps=60, batch_size=8, lr=1e-7, curve_every=10, curve_items=8)
    early = tune(lm, prompter, items[8:], items[:8], TuneConfig(**base, early_stop=True))
    full = tune(lm, prompter, items[8:], items[:8], TuneConfig(**base, early_stop=False))
    assert early.early_stop_step == 20 and early.steps_run == 20  # the first step it may stop at
    assert early.summary()["early_stop_step"] == 20 and full.summary()["early_stop_step"] is None
    assert [p["step"] for p in early.curve if p["format_rate"] is not None] == [0, 10, 20]
    assert all(p["held_out_loss"] > 0 for run in (early, full) for p in run.curve if p["format_rate"] is not None)
    assert [p["held_out_loss"] for p in early.curve if p["format_rate"] is not None] == [
        p["held_out_loss"] for p in full.curve if p["format_rate"] is not None][:3]  # with early stop or without
    # Same seeded batches: the stopped run is the full run's trajectory cut at that step.
    assert [p["loss"] for p in early.curve] == [p["loss"] for p in full.curve][:21]
    assert full.steps_run == 60
    # Still learning (a real learning rate on the toy task): no stop before the end.
    learning = tune(lm, prompter, items[8:], items[:8], TuneConfig(**{**base, "lr": 0.1, "steps": 30}, early_stop=True))
    assert learning.early_stop_step is None and learning.steps_run == 30


def test_early_stop_never_fires_while_the_format_is_not_followed(lm):
    task = format_task()  # a random tiny model almost never writes '#': the held-out format stays low
    prompter = Prompter(lm, task, chat=False, shots=[])
    items = task.load().tune
    cfg = TuneConfig(num_tokens=4, steps=40, batch_size=8, lr=1e-7, curve_every=10, curve_items=8, early_stop=True)
    result = tune(lm, prompter, items[8:], items[:8], cfg)
    held_out = [p["format_rate"] for p in result.curve if p["format_rate"] is not None]
    assert max(held_out) < 0.9 and len(set(held_out)) == 1  # flat, and below the format
    assert result.early_stop_step is None and result.steps_run == 40


def test_early_stop_resumes_as_stopped(lm, tmp_path):
    task = dataclasses.replace(format_task(), strict=lambda out, ex: "x")
    prompter = Prompter(lm, task, chat=False, shots=[])
    items = task.load().tune
    cfg = TuneConfig(num_tokens=4, steps=60, batch_size=8, lr=1e-7, curve_every=10, curve_items=8, early_stop=True)

    def killed_after_the_stop(point):
        if point["step"] == 20:
            raise KeyboardInterrupt  # the checkpoint of step 20 (the stop) is on disk

    with pytest.raises(KeyboardInterrupt):
        tune(lm, prompter, items[8:], items[:8], cfg, Kept(tmp_path), on_step=killed_after_the_stop)
    resumed = tune(lm, prompter, items[8:], items[:8], cfg, Kept(tmp_path))
    assert resumed.early_stop_step == 20 and resumed.steps_run == 20


def test_held_out_loss_equals_the_tuning_loss_without_gradients(lm):
    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    items = task.load().tune[:5]
    prompts, targets = [prompter.ids(e, "soft-prompt") for e in items], [prompter.target_ids(e) for e in items]
    soft = torch.randn(3, lm.model.get_input_embeddings().weight.shape[1]) * 0.01
    expected = float(tuning_loss.target_loss(lm, prompts, targets, soft))
    assert tuning_loss.target_loss_value(lm, prompts, targets, soft, max_pass_tokens=8) == pytest.approx(
        expected, rel=1e-5)


def _gemma2(window: int):
    from tiny import tiny_tokenizer
    from transformers import Gemma2Config, Gemma2ForCausalLM

    from softeval.lm.models import BASE, LoadedModel

    tok = tiny_tokenizer()
    torch.manual_seed(0)
    config = Gemma2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=window,
                          initializer_range=0.5, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return LoadedModel(Gemma2ForCausalLM(config).eval().requires_grad_(False), tok, "tiny-gemma2", BASE, "test",
                       pad_id=0, eos_ids=(2,))


@pytest.mark.parametrize("model", ["llama", "gemma2-window-64", "gemma2-window-6"])
@pytest.mark.parametrize("prefix_cache", [False, True])
def test_held_out_loss_from_the_generation_prefill_equals_a_pass_of_its_own(lm, model, prefix_cache):
    """A curve point reads the held-out loss from its generation's prefill (generation.generate targets=):
    the same value as target_loss_value's own pass, with a soft prompt, a shared prefix, ragged and
    one-token targets, and on a sliding-window model (beyond its window: a pass of its own)."""
    if model != "llama":
        lm = _gemma2(int(model.rsplit("-", 1)[1]))
    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    items = task.load().tune[:7]
    prompts = [[5, 6, 7] + prompter.ids(e, "soft-prompt") for e in items]  # a shared prefix
    targets = [prompter.target_ids(e) for e in items]
    targets[2] = targets[2][:1]
    targets[4] = targets[4] + [9, 10, 11]
    soft = torch.randn(3, lm.model.get_input_embeddings().weight.shape[1]) * 0.05
    expected = tuning_loss.target_loss_value(lm, prompts, targets, soft)
    gen = generation.generate(lm, prompts, soft=soft, max_new_tokens=4, batch_size=3, prefix_cache=prefix_cache,
                              targets=targets)
    outputs, nll = gen.texts, gen.target_nll
    assert sum(nll) / sum(map(len, targets)) == pytest.approx(expected, rel=1e-5)
    assert outputs == generation.generate(lm, prompts, soft=soft, max_new_tokens=4, batch_size=3,
                                          prefix_cache=prefix_cache).texts


def test_without_a_held_out_slice_tuning_still_checkpoints_and_resumes(lm, tmp_path):
    """--curve-items 0 (no held-out slice, no curve scoring): the checkpoint is still written every
    curve_every steps, so a killed run resumes instead of tuning from step 0."""
    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    items = task.load().tune
    cfg = TuneConfig(num_tokens=3, steps=6, curve_every=3, curve_items=0)
    full = tune(lm, prompter, items, [], cfg)

    def interrupt(point):
        if point["step"] == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tune(lm, prompter, items, [], cfg, Kept(tmp_path), on_step=interrupt)
    resumed = tune(lm, prompter, items, [], cfg, Kept(tmp_path))
    assert resumed.resumed_at == [3]
    torch.testing.assert_close(resumed.part.weight, full.part.weight, rtol=0, atol=0)
    assert [p["step"] for p in resumed.curve] == [p["step"] for p in full.curve]


def test_a_tuning_that_never_reached_the_format_says_how_far_it_got_and_what_to_try():
    from softeval.run.training import not_reached

    curve = [{"step": 0, "loss": None, "format_rate": 0.0}, {"step": 10, "loss": 1.3, "format_rate": None},
             {"step": 20, "loss": 1.2, "format_rate": 0.125}, {"step": 30, "loss": 1.2, "format_rate": 0.125}]
    said = not_reached(curve, "soft-prompt")
    assert said.startswith("not reached on the held-out slice (best 0.12 at step 20): the soft prompt did not learn")
    assert "--steps" in said and "--lr" in said and "--init" in said
    assert not_reached([{"step": 3, "loss": 1.0, "format_rate": None}], "soft-prompt").startswith("not measured")
    from softeval.methods.soft_prompt import AFTER_THE_RECIPE
    from softeval.run.config import RunConfig
    from softeval.run.training import advice

    assert not_reached(curve, "soft-prompt", cfg=RunConfig(model="m", task="mmlu")).endswith(advice("soft-prompt"))
    # it tuned with the recipe: not told it again
    after = not_reached(curve, "soft-prompt", cfg=RunConfig(model="m", task="gsm8k"))
    assert after.endswith(AFTER_THE_RECIPE) and "--lr 0.3" not in after
    other_lr = RunConfig(model="m", task="gsm8k", lr=0.1)
    assert not_reached(curve, "soft-prompt", cfg=other_lr).endswith(advice("soft-prompt"))
    # a warm start with the rest of the recipe goes on from a soft prompt: not told --init instruction and the rest
    warm = RunConfig(model="m", task="gsm8k", init="from:runs/m/gsm8k/soft-prompt/seed1/soft_prompt")
    assert not_reached(curve, "soft-prompt", cfg=warm).endswith(AFTER_THE_RECIPE)
    assert not_reached(curve, "soft-prompt", cfg=dataclasses.replace(warm, lr=0.1)).endswith(advice("soft-prompt"))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.01, 5.0), min_size=0, max_size=6))
def test_a_held_out_loss_is_said_to_be_still_falling_only_when_its_last_point_fell_past_the_early_stop_delta(losses):
    """The end of a tuning that missed the format says the held-out loss was still falling exactly when its last
    point is more than EARLY_STOP_MIN_DELTA below the lowest earlier one, the rule early stop's plateau reads, and the
    two numbers it shows are those points'."""
    from softeval.run.training import not_reached, still_falling
    from softeval.run.tuning_loop import EARLY_STOP_MIN_DELTA, EARLY_STOP_MIN_POINTS, plateau

    curve = [{"step": 20 * i, "loss": None, "format_rate": 0.0, "held_out_loss": x} for i, x in enumerate(losses)]
    said = still_falling(curve)
    falling = len(losses) >= 2 and losses[-1] < min(losses[:-1]) * (1 - EARLY_STOP_MIN_DELTA)
    assert bool(said) == falling
    if falling:
        n, low = len(losses), losses[:-1].index(min(losses[:-1]))
        assert said == (f"; its held-out loss was still falling ({losses[low]:.2f} at step {20 * low}, "
                        f"{losses[-1]:.2f} at step {20 * (n - 1)})")
    followed = [{**p, "format_rate": 1.0} for p in curve]  # the same losses where the format was reached
    if len(curve) > EARLY_STOP_MIN_POINTS:
        assert plateau(followed, 16) is not falling  # early stop waits exactly while the loss is said to fall
    if curve:
        assert ("still falling" in not_reached(curve, "soft-prompt")) == falling


def test_the_linear_schedule_falls_from_lr_to_zero_and_constant_stays():
    linear = TuneConfig(lr=0.3, steps=80, lr_schedule="linear")
    assert [lr_at(linear, step) for step in (0, 40, 79)] == pytest.approx([0.3, 0.15, 0.3 / 80])
    constant = TuneConfig(lr=0.3, steps=80)
    assert constant.lr_schedule == "constant" and {lr_at(constant, step) for step in range(80)} == {0.3}


def test_the_schedule_changes_what_is_tuned(lm):
    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    items = task.load().tune
    soft = {schedule: tune(lm, prompter, items, [], TuneConfig(num_tokens=3, steps=4, curve_every=0, lr=0.1,
                                                               lr_schedule=schedule)).part.weight
            for schedule in ("constant", "linear")}
    assert not torch.equal(soft["constant"], soft["linear"])


def test_the_answer_lines_share_reaches_every_steps_loss(lm, monkeypatch):
    from softeval.run.config import RunConfig

    seen, real = [], tuning_loss.answer_line_weights
    monkeypatch.setattr(tuning_loss, "answer_line_weights",
                        lambda tok, targets, share: seen.append(share) or real(tok, targets, share))
    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    tune(lm, prompter, task.load().tune, [], TuneConfig(num_tokens=2, steps=3, curve_every=0, answer_share=0.4))
    assert seen == [0.4] * 3
    assert TuneConfig.of(RunConfig(model="m", task="t", answer_share=0.3)).answer_share == 0.3


def test_with_an_answer_share_the_held_out_loss_is_the_weighted_one_tuning_minimises(lm):
    """Early stop watches the loss that is tuned: with --answer-share the curve's held-out loss is the
    answer-line-weighted loss of the held-out targets; without it, the plain mean as before."""
    from softeval.run.tuning_loop import curve_point

    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    items = task.load().tune[:4]
    lines = [" step a\nstep b\n#### 4", " so\n#### 12\n", " 9 then 1\n#### 9", " one\n#### 1"]
    by_id = {e.id: lm.tokenizer(t, add_special_tokens=False).input_ids for e, t in zip(items, lines)}
    prompter.target_ids = lambda e, method="soft-prompt": by_id[e.id]
    prompts, targets = [prompter.ids(e, "soft-prompt") for e in items], [by_id[e.id] for e in items]
    soft = torch.randn(3, lm.model.get_input_embeddings().weight.shape[1]) * 0.05
    weighted = curve_point(lm, prompter, items, soft, 2, held_out_loss=True, answer_share=0.8)["held_out_loss"]
    plain = curve_point(lm, prompter, items, soft, 2, held_out_loss=True)["held_out_loss"]
    weights = tuning_loss.answer_line_weights(lm.tokenizer, targets, 0.8)
    assert weighted == pytest.approx(float(tuning_loss.target_loss(lm, prompts, targets, soft, weights)), rel=1e-5)
    assert plain == pytest.approx(float(tuning_loss.target_loss(lm, prompts, targets, soft)), rel=1e-5)
    assert weighted != pytest.approx(plain, rel=1e-4)  # a tiny random model: close, yet 10x the 1e-5 above


def test_a_checkpoint_whose_held_out_loss_was_not_the_weighted_one_is_not_resumed(lm, tmp_path):
    """With --answer-share the curve's held-out loss is the weighted one early stop compares; a checkpoint from a
    softeval that recorded the plain loss there (its identity lacks the marker) is discarded, never mixed in."""
    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    items = task.load().tune
    cfg = TuneConfig(num_tokens=3, steps=6, curve_every=3, curve_items=4, answer_share=0.5)

    def interrupt(point):
        if point["step"] == 4:
            raise KeyboardInterrupt

    for folder in (tmp_path / "now", tmp_path / "older"):
        with pytest.raises(KeyboardInterrupt):
            tune(lm, prompter, items[4:], items[:4], cfg, Kept(folder), on_step=interrupt)
    assert tune(lm, prompter, items[4:], items[:4], cfg, Kept(tmp_path / "now")).resumed_at == [3]
    state = tmp_path / "older" / "tune_state.json"
    saved = json.loads(state.read_text())
    del saved["identity"]["held_out_loss"]  # as an older softeval wrote it
    state.write_text(json.dumps(saved))
    said = []
    again = tune(lm, prompter, items[4:], items[:4], cfg, Kept(tmp_path / "older", log=said.append))
    assert again.resumed_at == [] and "discarded" in said[0]
