"""Tune a trainable part on a task's tuning split: AdamW on that part only, the model's weights frozen.

The part is whatever the method's spec's maker builds (methods/part.py ``TrainedPart``: a soft prompt, a LoRA
adapter, prefix tuning's per-layer keys and values); the one loop reads of it only the vectors it puts before the
prompt (``soft``; None where it is in the model), its named tensors, its switch between tuning and scoring and
how messages name it (``what``). The loss is cross-entropy on the target tokens only (the answer in the
required format, then EOS). Every ``curve_every`` steps the part is scored on a small held-out slice of
the tuning split (format_rate, accuracy): the learning curve shows format-following saturate while
knowledge stays flat. A NaN loss stops tuning and keeps the last finite part. With a checkpoint folder,
tuning resumes where an interrupted run stopped: a Ctrl-C or SIGTERM during a step's update lets the step finish
and checkpoints it (``HeldInterrupts``; a second one stops at once, undoing the step), one while a curve point is
scored checkpoints the step with its point left to score, which the resumed run scores first.
"""

from __future__ import annotations

import hashlib
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from softeval.lm import generation, precision, tuning_loss
from softeval.lm.models import LoadedModel
from softeval.lm.softprompt import SoftPrompt
from softeval.methods import maker_of
from softeval.methods.part import TrainedPart
from softeval.metrics import FOLLOWS_FORMAT, first_step_reaching
from softeval.run.batch_plan import batches, length_grouped
from softeval.run.config import COMMAND_LINE, OPTIONS, RunConfig, Spelling, resolved_tune_dtype
from softeval.run.interrupts import HeldInterrupts
from softeval.run.parts import initialised
from softeval.run.scoring import score_output
from softeval.store import checkpoint as ckpt
from softeval.tasks.base import Example


@dataclass
class TuneConfig:
    """The options tuning reads. Its defaults are RunConfig's (the option table; where a default depends on
    the task's kind of target, the one-line targets'); a run builds it from its RunConfig with ``of``.
    ``weight_decay`` and ``pass_tokens`` are not run options."""

    num_tokens: int = RunConfig.tokens
    init: str = OPTIONS["init"].default
    steps: int = RunConfig.steps
    batch_size: int = RunConfig.batch_size
    lr: float = OPTIONS["lr"].default
    lr_schedule: str = OPTIONS["lr_schedule"].default
    # the answer line's share of the loss (tuning_loss.answer_line_weights); None: every target token alike
    answer_share: float | None = OPTIONS["answer_share"].default
    weight_decay: float = 0.0
    seed: int = RunConfig.seed
    curve_every: int = RunConfig.curve_every
    curve_items: int = RunConfig.curve_items
    eval_batch_size: int = RunConfig.eval_batch_size
    # >1: regroup each window of this many seeded batches by length. On MMLU's tuning split, 8 cuts
    # the padded tokens per step from 2.2x to 1.24x the real ones, but it also puts an item drawn
    # twice in a window into one batch and slowed format learning on the toy task: off by default.
    length_group: int = RunConfig.length_group
    # Padded tokens per forward pass: a batch is split into passes that fit memory (shortest rows
    # together), gradients accumulated; the same gradient as one pass. 0 = from the memory budget.
    pass_tokens: int = 0
    # Stop at a curve point once the held-out slice follows the format and has plateaued (``plateau``):
    # its format_rate is at least FOLLOWS_FORMAT, its target loss did not improve on the best earlier point
    # by EARLY_STOP_MIN_DELTA (relative) and its format_rate did not move. Every curve point records
    # ``held_out_loss``, early stop or not (a tuning that did not reach the format says whether it still fell).
    early_stop: bool = RunConfig.early_stop
    # the dtype of tuning's forward and backward (lm/precision.py); scoring keeps the run's dtype
    tune_dtype: str = RunConfig.tune_dtype

    @classmethod
    def of(cls, run: RunConfig, method: str | None = None, n_train: int | None = None) -> TuneConfig:
        """The tuning options of ``run`` for ``method``: each field that is a run option under the same name,
        ``num_tokens`` (``tokens``), the learning rate ``method``'s part reads, and with ``epochs`` the
        steps that many passes over ``n_train`` tuning items take in batches of ``batch_size``; ``lr``: the learning
        rate ``method``'s part reads (``PartMaker.learning_rate``: ``lora_lr`` for an adapter)."""
        shared = {f.name: getattr(run, f.name) for f in fields(cls) if f.name in OPTIONS}
        maker = maker_of(method) if method is not None else None
        if maker is not None:  # the part's own learning rate
            shared["lr"] = maker.learning_rate(run)
        if run.epochs is not None and n_train is not None:
            shared["steps"] = epoch_steps(run.epochs, n_train, run.batch_size)
        shared["tune_dtype"] = resolved_tune_dtype(run)  # as the run's identity has it (config.options)
        return cls(num_tokens=run.tokens, **shared)


def epoch_steps(epochs: float, n_train: int, batch_size: int) -> int:
    """The steps of ``epochs`` passes over ``n_train`` items in batches of ``batch_size`` (at least 1)."""
    return max(1, math.ceil(epochs * n_train / batch_size))


@dataclass
class TuneResult:
    part: TrainedPart  # the tuned part
    curve: list[dict]
    steps_run: int
    final_loss: float | None
    stopped_early: str | None
    seconds: float  # tuning time over every process that worked on it (a resumed run adds its earlier ones)
    config: dict = field(default_factory=dict)
    resumed_at: list[int] = field(default_factory=list)  # steps a run resumed from a checkpoint at
    early_stop_step: int | None = None  # the step an early stop (TuneConfig.early_stop) ended tuning at
    trainable_parameters: int = 0  # the numbers tuning trained (the part's)

    def summary(self) -> dict:
        return {
            "steps_run": self.steps_run, "final_loss": self.final_loss, "stopped_early": self.stopped_early,
            "format_0.9_step": first_step_reaching(self.curve, "format_rate", FOLLOWS_FORMAT),
            "seconds": round(self.seconds, 2), "resumed_at_steps": self.resumed_at,
            "early_stop_step": self.early_stop_step, "trainable_parameters": self.trainable_parameters,
            **self.config,
        }


# Early stop: the relative held-out loss improvement that still counts as learning, and the fewest
# curve points after step 0 (with curve_every 10: no stop before step 20). BENCHMARKS.md
# ("Early stop") shows the scored results it gives next to the full 80 steps.
EARLY_STOP_MIN_DELTA = 0.01
EARLY_STOP_MIN_POINTS = 2


def lr_at(config: TuneConfig, step: int) -> float:
    """The learning rate of the step after ``step`` steps: ``lr`` throughout (constant), or falling
    linearly to 0 over ``steps`` (linear). A function of the step alone, so a resumed run continues it."""
    if config.lr_schedule == "linear":
        return config.lr * (1 - step / config.steps)
    return config.lr


def plateau(curve: list[dict], n_items: int) -> bool:
    """Has tuning plateaued at the last curve point? The held-out slice follows the format (format_rate at
    least FOLLOWS_FORMAT: early stop never cuts short a format still to learn, however slowly it rises),
    its held-out loss is not below the best earlier point's by more than EARLY_STOP_MIN_DELTA (relative),
    and its held-out format_rate is within one item of the previous point's (no longer being learned)."""
    points = [p for p in curve if p.get("held_out_loss") is not None]
    if len(points) < EARLY_STOP_MIN_POINTS + 1 or points[-1]["format_rate"] < FOLLOWS_FORMAT:
        return False
    format_moved = abs(points[-1]["format_rate"] - points[-2]["format_rate"]) > 1 / max(1, n_items) + 1e-9
    return still_learning(points) is None and not format_moved


def still_learning(curve: list[dict]) -> tuple[dict, dict] | None:
    """(the earlier curve point with the lowest held-out loss, the last point) when the last point's loss is below
    that one's by more than EARLY_STOP_MIN_DELTA (relative): the loss was still falling at the last point; else None
    (also with fewer than two points with a held-out loss). The one rule for early stop's plateau and the end of
    tuning's words."""
    points = [p for p in curve if p.get("held_out_loss") is not None]
    if len(points) < 2:
        return None
    best, last = min(points[:-1], key=lambda p: p["held_out_loss"]), points[-1]
    return (best, last) if last["held_out_loss"] < best["held_out_loss"] * (1 - EARLY_STOP_MIN_DELTA) else None


# The held-out slice is a random draw of lengths (MMLU: 99 to 555 tokens), generated in batches of
# similar length rather than padded to its longest prompt (2.6x the real tokens in one batch of 16).
CURVE_MAX_PADDING = 1.25


def curve_point(lm: LoadedModel, prompter, items: list[Example], soft: torch.Tensor | None, batch_size: int,
                held_out_loss: bool = False, method: str | None = None, answer_share: float | None = None) -> dict:
    """Format and accuracy of the held-out slice; with ``held_out_loss`` also its loss, the one tuning
    minimises: the mean target cross-entropy read off the generation's own prefill, or, where
    ``answer_share`` weighs the answer lines, the weighted loss in a pass of its own."""
    task = prompter.task
    prompts = [prompter.ids(e, method) for e in items]
    targets = [prompter.target_ids(e, method) for e in items] if held_out_loss else None
    weights = targets and tuning_loss.answer_line_weights(lm.tokenizer, targets, answer_share)
    gen = generation.generate(lm, prompts, soft=soft, max_new_tokens=task.max_new_tokens, stop=task.stop,
                              batch_size=batch_size, targets=None if weights else targets,
                              max_padding=CURVE_MAX_PADDING, answer_end=task.answer_end)
    scored = [score_output(task, e, o) for e, o in zip(items, gen.texts)]
    point = {"format_rate": sum(s["format_ok"] for s in scored) / len(scored),
             "accuracy": sum(s["correct"] for s in scored) / len(scored)}
    if weights:
        point["held_out_loss"] = tuning_loss.target_loss_value(lm, prompts, targets, soft, weights=weights)
    elif targets is not None:  # the mean target cross-entropy (tuning_loss.target_loss_value), from the same prefill
        point["held_out_loss"] = sum(gen.target_nll) / max(1, sum(map(len, targets)))
    return point


@dataclass(frozen=True)
class Kept:
    """Where and as what the tuning state is kept (softeval.store.checkpoint): ``folder``, saved in at every curve
    point and resumed from; the state records ``identity`` (the run's, from the caller) beside the tuning config and
    items, and one recorded for anything else is discarded, ``log(message)`` saying so (default: on stderr)."""

    folder: Path
    identity: dict | None = None
    log: Callable[[str], None] | None = None


@dataclass(frozen=True)
class TunedPart:
    """What is tuned, for which run. ``part``: the method's part, built by its maker (run/training.py); None, for a
    program or a test that tunes the default part: a soft prompt initialised from the tuning config, whose init
    refused once the model is loaded is worded with the options as ``spelling`` spells them. ``method``: the run's
    method, whose prompt (``prompter.ids(item, method)``) tuning and the held-out slice read."""

    part: TrainedPart | None = None
    method: str | None = None
    spelling: Spelling = COMMAND_LINE


def tune(lm: LoadedModel, prompter, train: list[Example], curve_items: list[Example], config: TuneConfig,
         kept: Kept | None = None, on_step=None, tuned: TunedPart = TunedPart()) -> TuneResult:
    """Run the tuning loop; ``on_step(point)`` is called after every step with its curve point
    (``step``, ``loss``, and ``format_rate`` / ``accuracy`` where the slice was scored).

    ``tuned``: what is tuned (``TunedPart``; default: a soft prompt initialised from ``config``, ``TuneResult.part``).
    ``kept``: where the state is saved at every curve point and resumed from (``Kept``); None: nowhere.
    """
    started = time.time()
    torch.manual_seed(config.seed)
    part = _soft_prompt(lm, prompter, config, tuned.spelling) if tuned.part is None else tuned.part
    folder, identity, log = (None, None, None) if kept is None else (kept.folder, kept.identity, kept.log)
    loop = _Loop(lm, prompter, train, curve_items, config, part, tuned.method, folder, started)
    with HeldInterrupts() as held:
        loop.resume(_state_identity(identity, config, train + curve_items), log or _stderr)
        loop.score_pending(on_step)
        loop.first_point()
        # The loss's head is checked once per model (a probe through it): here, with the adapter's dropout off,
        # so that the probe neither sees dropout nor draws from the RNG a resumed run restores.
        tuning_loss.target_head(loop.tuner)
        while loop.step < config.steps and loop.early is None and loop.stopped is None:
            loop.advance(on_step, held)
        loop.stop_if_held(held)
    return loop.result()


def _soft_prompt(lm: LoadedModel, prompter, config: TuneConfig, spelling: Spelling) -> SoftPrompt:
    """The default part: the soft prompt ``config`` initialises (its init, its tokens, its seed; parts.initialised)."""
    instruction = (prompter.task.instruction or "") if prompter is not None else ""
    return initialised(lm, config.num_tokens, config.init, config.seed, instruction, spelling)


def _state_identity(run: dict | None, config: TuneConfig, items: list[Example]) -> dict:
    """What a checkpoint's state is of: the run (``run``, the caller's identity), this config and the tuning and
    held-out items; a state recorded for anything else is discarded."""
    identity = {"run": run, "tune": asdict(config),
                "items": hashlib.sha256("\n".join(e.id for e in items).encode()).hexdigest()}
    if config.answer_share is not None:  # a checkpoint from before the held-out loss was weighted too lacks this
        identity["held_out_loss"] = "answer-line weighted"
    return identity


@dataclass
class _Loop:
    """One tuning run's state between steps: the part, its optimizer and the plan of batches; the curve so far,
    the step reached and why tuning stopped (``stopped``: a non-finite loss or part; ``early``: early stop's step);
    the checkpoint on disk (``kept``: its step)."""

    lm: LoadedModel
    prompter: Any
    train: list[Example]
    curve_items: list[Example]
    config: TuneConfig
    part: TrainedPart  # the trainable part (methods/part.py)
    method: str | None  # the run's method: the prompts tuned and scored on are its own (prompter.ids)
    checkpoint: Path | None
    started: float  # time.time() when tuning started
    curve: list[dict] = field(default_factory=list)
    step: int = 0
    last_loss: float | None = None
    stopped: str | None = None
    early: int | None = None
    earlier_seconds: float = 0.0
    resumed_at: list[int] = field(default_factory=list)
    kept: int | None = None
    identity: dict = field(default_factory=dict)
    pending: dict | None = None  # a resumed curve point still to score (``score_pending``)

    def __post_init__(self) -> None:
        config = self.config
        self.params = self.part.trainable()
        self.optimizer = torch.optim.AdamW(list(self.params.values()), lr=config.lr, weight_decay=config.weight_decay)
        self.tuner = precision.for_tuning(self.lm, config.tune_dtype)  # lm, or its frozen copy in the tuning dtype
        self.plan = batches(len(self.train), config.batch_size, config.steps, config.seed)
        self.prompts: dict[int, tuple[list[int], list[int]]] = {}
        if config.length_group > 1:
            self.plan = length_grouped(self.plan, lambda i: sum(map(len, self.pair(i))), config.length_group,
                                       config.seed)
        self.what = self.part.what  # in the stop's words

    def pair(self, i: int) -> tuple[list[int], list[int]]:
        """The prompt and target token ids of tuning item ``i`` (encoded once)."""
        if i not in self.prompts:
            item = self.train[i]
            self.prompts[i] = (self.prompter.ids(item, self.method), self.prompter.target_ids(item, self.method))
        return self.prompts[i]

    def scored(self) -> dict:
        """The held-out slice's curve point with the part as it is now."""
        return curve_point(self.lm, self.prompter, self.curve_items, _detached(self.part.soft),
                           self.config.eval_batch_size, True, self.method, self.config.answer_share)

    def resume(self, identity: dict, log: Callable[[str], None]) -> None:
        """Continue from the checkpoint's state where one of ``identity`` is there (``log`` says why one is not)."""
        self.identity = identity
        state = self.checkpoint and ckpt.load(self.checkpoint, identity, self.params, self.optimizer, log)
        if state:
            self.step, self.curve, self.last_loss = state["step"], state["curve"], state["loss"]
            self.earlier_seconds, self.resumed_at = state["seconds"], state["resumed_at"] + [self.step]
            self.kept = self.step
            if state.get("score_pending"):
                self.pending = self.curve.pop()

    def keep(self, points: list[dict], pending: bool = False) -> int:
        """Checkpoint the state after the last of ``points`` (a killed run resumes from here); its step. ``pending``:
        the last point is a curve point still to score."""
        ckpt.save(self.checkpoint, self.params, self.optimizer, self.identity,
                  {"step": points[-1]["step"], "loss": points[-1]["loss"], "curve": points,
                   "seconds": self.earlier_seconds + time.time() - self.started, "resumed_at": self.resumed_at,
                   **({"score_pending": True} if pending else {})})
        return points[-1]["step"]

    def first_point(self) -> None:
        """Step 0's curve point on a fresh start, and early stop's verdict on a resumed one."""
        config = self.config
        if self.step == 0 and config.curve_every and self.curve_items and not self.curve:
            self.curve.append({"step": 0, "loss": None, **self.scored()})
            if self.checkpoint:  # the step-0 point generates on every held-out item (minutes on worked solutions)
                self.kept = self.keep(self.curve)
        if config.early_stop and 0 < self.step < config.steps and plateau(self.curve, len(self.curve_items)):
            self.early = self.step  # a run that had stopped early at its last checkpoint (killed before it finished)

    def advance(self, on_step, held: HeldInterrupts) -> None:
        """One step, whole or undone. An interrupt (Ctrl-C, SIGTERM) held through the update (``held``) stops once
        the step is whole and checkpointed; one at a curve point's scoring checkpoints the step with the point to
        score (the resumed run scores it first); one that stops the update at once (a second interrupt) undoes the
        step and checkpoints the last whole one."""
        self.stop_if_held(held)
        before = None
        try:
            with held.holding():
                before = StepStart(self.params, self.optimizer)
                point = self.update(before)
        except KeyboardInterrupt:
            if before is not None:
                before.restore(self.params, self.optimizer)  # the step not whole
            self.keep_on_stop(self.curve)
            raise
        if point is None:
            return
        to_score = self.curve_step(point["step"]) and bool(self.curve_items)
        if held.held is not None:  # held through the update: the step kept (its curve point left to score), then out
            self.keep_on_stop(self.curve + [point], to_score)
            held.raise_held()  # whatever the handler raises (a worker's may exit)
        updated = ckpt.rng_states()  # where a point left to score resumes from
        try:
            self.at_curve_point(point)
        except KeyboardInterrupt:
            pending = to_score and point["format_rate"] is None
            if pending:
                ckpt.set_rng_states(updated)
            self.keep_on_stop(self.curve + [point], pending)
            raise
        try:
            if on_step:
                with held.holding():  # a signal here is held: the step is kept
                    on_step(point)
        except KeyboardInterrupt:  # raised by on_step itself: the step undone, as one stopped at once
            before.restore(self.params, self.optimizer)
            self.keep_on_stop(self.curve)
            raise
        self.step, self.last_loss = point["step"], point["loss"]
        self.curve.append(point)

    def stop_if_held(self, held: HeldInterrupts) -> None:
        """Between steps: the interrupt held, if any, raised once the state is checkpointed."""
        if held.held is not None:
            self.keep_on_stop(self.curve)
            held.raise_held()

    def keep_on_stop(self, points: list[dict], pending: bool = False) -> None:
        """Checkpoint ``points`` as an interrupted run stops, where they go past the checkpoint on disk."""
        if self.checkpoint and points and (self.kept is None or points[-1]["step"] > self.kept):
            self.kept = self.keep(points, pending)

    def score_pending(self, on_step) -> None:
        """A resumed run whose checkpoint left its last curve point to score (interrupted while scoring it):
        scored now, as the interrupted run would have."""
        point, self.pending = self.pending, None
        if point is None:
            return
        try:
            self.at_curve_point(point)
        except KeyboardInterrupt:
            self.pending = point  # the checkpoint on disk still has it to score
            raise
        self.curve.append(point)
        if on_step:
            on_step(point)

    def update(self, before: StepStart) -> dict | None:
        """The step's optimizer update and its point (step, loss); None, with ``stopped`` saying why, where the
        loss or the part became non-finite (the part then is the one of the step before, ``before``)."""
        loss = self.loss_backward()
        if not math.isfinite(loss):
            self.stopped = f"loss became {loss} at step {self.step + 1}; kept the {self.what} of step {self.step}"
            return None
        self.optimizer.step()
        if not all(torch.isfinite(p).all() for p in self.params.values()):
            before.restore(self.params, self.optimizer)
            self.stopped = f"{self.what} became non-finite at step {self.step + 1}; kept the one of step {self.step}"
            return None
        return {"step": self.step + 1, "loss": loss, "format_rate": None, "accuracy": None}

    def loss_backward(self) -> float:
        """The loss of this step's batch, its gradients accumulated, at this step's learning rate."""
        batch = [self.pair(i) for i in self.plan[self.step]]
        self.optimizer.zero_grad(set_to_none=True)
        for group in self.optimizer.param_groups:
            group["lr"] = lr_at(self.config, self.step)
        self.part.tuning(self.tuner.model, True)
        try:
            targets = [t for _, t in batch]
            return tuning_loss.target_loss_backward(
                self.tuner, [p for p, _ in batch], targets, self.part.soft, self.config.pass_tokens or None,
                tuning_loss.answer_line_weights(self.lm.tokenizer, targets, self.config.answer_share))
        finally:
            self.part.tuning(self.tuner.model, False)

    def at_curve_point(self, point: dict) -> None:
        """At a curve point: the held-out slice scored into ``point``, early stop's verdict, the checkpoint."""
        config, step = self.config, point["step"]
        if not self.curve_step(step):
            return
        if self.curve_items:
            point.update(self.scored())
            if config.early_stop and step < config.steps and plateau(self.curve + [point], len(self.curve_items)):
                self.early = step
        if self.checkpoint:  # also without a held-out slice
            self.kept = self.keep(self.curve + [point])

    def curve_step(self, step: int) -> bool:
        """Is ``step`` a curve point (scored where there is a held-out slice, checkpointed)?"""
        config = self.config
        return bool(config.curve_every) and (step % config.curve_every == 0 or step == config.steps)

    def result(self) -> TuneResult:
        last = self.last_loss
        return TuneResult(self.part, self.curve, self.step,
                          last if last is None or math.isfinite(last) else None,
                          self.stopped, self.earlier_seconds + time.time() - self.started,
                          {**asdict(self.config),
                           "tune_dtype_ran": precision.dtype_name(precision.model_dtype(self.tuner))},
                          self.resumed_at, self.early, sum(p.numel() for p in self.params.values()))


class StepStart:
    """What one tuning step changes, copied before it: the tuned tensors, AdamW's state and the RNGs (LoRA's
    dropout draws from torch's). ``restore`` undoes a step that did not finish (interrupted part-way
    through AdamW's in-place update, or after it), so the checkpoint then written is of the last whole step
    and a resumed run repeats the interrupted one exactly."""

    def __init__(self, params: dict[str, torch.Tensor], optimizer: torch.optim.Optimizer) -> None:
        self.params = {key: p.detach().clone() for key, p in params.items()}
        self.optimizer = {p: {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in state.items()}
                          for p, state in optimizer.state.items()}
        self.rng = ckpt.rng_states()

    def restore(self, params: dict[str, torch.Tensor], optimizer: torch.optim.Optimizer) -> None:
        with torch.no_grad():
            for key, p in params.items():
                p.copy_(self.params[key])
        optimizer.state.clear()
        optimizer.state.update(self.optimizer)
        ckpt.set_rng_states(self.rng)


def _detached(soft: torch.Tensor | None) -> torch.Tensor | None:
    return None if soft is None else soft.detach()


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)
