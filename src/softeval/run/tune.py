"""Tune a trainable part on a task's tuning split: AdamW on that part only, the model's weights frozen.

The part is a soft prompt (lm.softprompt.SoftPrompt, the soft-prompt method) or a LoRA adapter put into
the model (lm.lora.LoraAdapter, the lora method); the one loop reads of it only its prompt method, the
vectors it puts before the prompt (the soft prompt; none for LoRA), its named tensors and its switch
between tuning and scoring. The loss is cross-entropy on the target tokens only (the answer in the
required format, then EOS). Every ``curve_every`` steps the part is scored on a small held-out slice of
the tuning split (format_rate, accuracy): the learning curve shows format-following saturate while
knowledge stays flat. A NaN loss stops tuning and keeps the last finite part. With a checkpoint folder,
tuning resumes where an interrupted run stopped.
"""

from __future__ import annotations

import hashlib
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch

from softeval.lm import generation, precision, tuning_loss
from softeval.lm.models import LoadedModel
from softeval.lm.softprompt import InitRefused, SoftPrompt
from softeval.metrics import FOLLOWS_FORMAT, first_step_reaching
from softeval.run.config import COMMAND_LINE, OPTIONS, RunConfig, Spelling, resolved_tune_dtype
from softeval.run.scoring import score_output
from softeval.run.validate import init_refusal
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
    def of(cls, run: RunConfig, method: str = "soft-prompt", n_train: int | None = None) -> TuneConfig:
        """The tuning options of ``run`` for ``method``: each field that is a run option under the same name,
        ``num_tokens`` (``tokens``), the lora learning rate (``lora_lr``) for lora, and with ``epochs`` the
        steps that many passes over ``n_train`` tuning items take in batches of ``batch_size``."""
        shared = {f.name: getattr(run, f.name) for f in fields(cls) if f.name in OPTIONS}
        if method == "lora":
            shared["lr"] = run.lora_lr
        if run.epochs is not None and n_train is not None:
            shared["steps"] = epoch_steps(run.epochs, n_train, run.batch_size)
        shared["tune_dtype"] = resolved_tune_dtype(run)  # as the run's identity has it (config.options)
        return cls(num_tokens=run.tokens, **shared)


def epoch_steps(epochs: float, n_train: int, batch_size: int) -> int:
    """The steps of ``epochs`` passes over ``n_train`` items in batches of ``batch_size`` (at least 1)."""
    return max(1, math.ceil(epochs * n_train / batch_size))


@dataclass
class TuneResult:
    soft: SoftPrompt | None  # the tuned soft prompt (None when the part was another: a LoRA adapter)
    curve: list[dict]
    steps_run: int
    final_loss: float | None
    stopped_early: str | None
    seconds: float  # tuning time over every process that worked on it (a resumed run adds its earlier ones)
    config: dict = field(default_factory=dict)
    resumed_at: list[int] = field(default_factory=list)  # steps a run resumed from a checkpoint at
    early_stop_step: int | None = None  # the step an early stop (TuneConfig.early_stop) ended tuning at
    trainable_parameters: int = 0  # the numbers tuning trained (the soft prompt's, or the LoRA adapter's)

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


def batches(n_items: int, batch_size: int, steps: int, seed: int) -> list[list[int]]:
    """Item indices of every step: seeded shuffles of the tuning items, epoch after epoch."""
    rng = random.Random(seed)
    out, pool = [], []
    for _ in range(steps):
        batch = []
        while len(batch) < batch_size:
            if not pool:
                pool = list(range(n_items))
                rng.shuffle(pool)
            batch.append(pool.pop())
        out.append(batch)
    return out


def length_grouped(plan: Sequence[Sequence[int]], lengths: Callable[[int], int], window: int,
                   seed: int = 0) -> list[list[int]]:
    """Regroup a seeded batch plan by length, ``window`` consecutive steps at a time.

    The items of each window (the same items, drawn by the same seeded shuffle) are sorted by
    length and cut into batches of the original sizes, so each batch pads less; the batches of a
    window are then put in a seeded order. Deterministic for a given plan, lengths and seed."""
    if window <= 1:
        return [list(b) for b in plan]
    out: list[list[int]] = []
    for start in range(0, len(plan), window):
        chunk = [list(b) for b in plan[start:start + window]]
        items = sorted((i for b in chunk for i in b), key=lambda i: (-lengths(i), i))
        regrouped, at = [], 0
        for b in chunk:
            regrouped.append(items[at:at + len(b)])
            at += len(b)
        random.Random(seed * 1_000_003 + start).shuffle(regrouped)
        out.extend(regrouped)
    return out


# The held-out slice is a random draw of lengths (MMLU: 99 to 555 tokens), generated in batches of
# similar length rather than padded to its longest prompt (2.6x the real tokens in one batch of 16).
CURVE_MAX_PADDING = 1.25


def curve_point(lm: LoadedModel, prompter, items: list[Example], soft: torch.Tensor | None, batch_size: int,
                held_out_loss: bool = False, method: str = "soft-prompt", answer_share: float | None = None) -> dict:
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


def tune(lm: LoadedModel, prompter, train: list[Example], curve_items: list[Example], config: TuneConfig,
         checkpoint: Path | None = None, on_step=None, identity: dict | None = None, log=None,
         name: Spelling = COMMAND_LINE, part=None) -> TuneResult:
    """Run the tuning loop; ``on_step(point)`` is called after every step with its curve point
    (``step``, ``loss``, and ``format_rate`` / ``accuracy`` where the slice was scored).

    ``part``: what is tuned, a LoRA adapter already in ``lm.model`` (lm.lora); default: a soft prompt
    initialised from ``config`` (``TuneResult.soft``).
    ``checkpoint``: a folder to save the state in at every curve point and to resume from
    (softeval.store.checkpoint). The state records ``identity`` (the run's, from the caller), this config
    and the tuning items; one recorded for anything else is discarded, and ``log(message)`` says so.
    ``name``: how the user wrote the options, for an init refused once the model is loaded.
    """
    started = time.time()
    torch.manual_seed(config.seed)
    if part is None:
        try:
            instruction = (prompter.task.instruction or "") if prompter is not None else ""
            part = SoftPrompt.initialise(lm, config.num_tokens, config.init, config.seed, instruction).to(lm.device)
        except InitRefused as refused:
            raise init_refusal(refused, name) from None
    params = part.trainable()
    optimizer = torch.optim.AdamW(list(params.values()), lr=config.lr, weight_decay=config.weight_decay)
    tuner = precision.for_tuning(lm, config.tune_dtype)  # lm, or its frozen copy in the tuning dtype
    plan = batches(len(train), config.batch_size, config.steps, config.seed)
    prompts = {}

    def pair(i: int) -> tuple[list[int], list[int]]:
        if i not in prompts:
            prompts[i] = (prompter.ids(train[i], part.method), prompter.target_ids(train[i], part.method))
        return prompts[i]

    if config.length_group > 1:
        plan = length_grouped(plan, lambda i: sum(map(len, pair(i))), config.length_group, config.seed)

    def scored() -> dict:
        return curve_point(lm, prompter, curve_items, _detached(part.soft), config.eval_batch_size, True,
                           part.method, config.answer_share)

    curve: list[dict] = []
    step, last_loss, stopped, early = 0, None, None, None
    earlier_seconds, resumed_at = 0.0, []
    identity = {"run": identity, "tune": asdict(config),
                "items": hashlib.sha256("\n".join(e.id for e in train + curve_items).encode()).hexdigest()}
    if config.answer_share is not None:  # a checkpoint from before the held-out loss was weighted too lacks this
        identity["held_out_loss"] = "answer-line weighted"
    state = checkpoint and ckpt.load(checkpoint, identity, params, optimizer, log or _stderr)
    if state:
        step, curve, last_loss = state["step"], state["curve"], state["loss"]
        earlier_seconds, resumed_at = state["seconds"], state["resumed_at"] + [step]

    def keep(points: list[dict]) -> int:
        """Checkpoint the state after the last of ``points`` (a killed run resumes from here); its step."""
        ckpt.save(checkpoint, params, optimizer, identity,
                  {"step": points[-1]["step"], "loss": points[-1]["loss"], "curve": points,
                   "seconds": earlier_seconds + time.time() - started, "resumed_at": resumed_at})
        return points[-1]["step"]

    kept = step if state else None  # the step of the checkpoint on disk
    if step == 0 and config.curve_every and curve_items and not curve:
        curve.append({"step": 0, "loss": None, **scored()})
        if checkpoint:  # the step-0 point generates on every held-out item (minutes on worked solutions): keep it
            kept = keep(curve)
    if config.early_stop and 0 < step < config.steps and plateau(curve, len(curve_items)):
        early = step  # a run that had stopped early at its last checkpoint (killed before it finished)
    what = "soft prompt" if part.method == "soft-prompt" else "adapter"
    # The loss's head is checked once per model (a probe through it): here, with the adapter's dropout off,
    # so that the probe neither sees dropout nor draws from the RNG a resumed run restores.
    tuning_loss.target_head(tuner)
    while step < config.steps and early is None:
        before = StepStart(params, optimizer)
        try:  # a step is whole or undone: an interrupt (Ctrl-C, SIGTERM) checkpoints the last whole step
            batch = [pair(i) for i in plan[step]]
            optimizer.zero_grad(set_to_none=True)
            for group in optimizer.param_groups:
                group["lr"] = lr_at(config, step)
            part.tuning(tuner.model, True)
            try:
                targets = [t for _, t in batch]
                loss = tuning_loss.target_loss_backward(
                    tuner, [p for p, _ in batch], targets, part.soft, config.pass_tokens or None,
                    tuning_loss.answer_line_weights(lm.tokenizer, targets, config.answer_share))
            finally:
                part.tuning(tuner.model, False)
            if not math.isfinite(loss):
                stopped = f"loss became {loss} at step {step + 1}; kept the {what} of step {step}"
                break
            optimizer.step()
            if not all(torch.isfinite(p).all() for p in params.values()):
                before.restore(params, optimizer)
                stopped = f"{what} became non-finite at step {step + 1}; kept the one of step {step}"
                break
            point = {"step": step + 1, "loss": loss, "format_rate": None, "accuracy": None}
            at_point = bool(config.curve_every) and (point["step"] % config.curve_every == 0
                                                     or point["step"] == config.steps)
            if curve_items and at_point:
                point.update(scored())
                if config.early_stop and point["step"] < config.steps and plateau(curve + [point], len(curve_items)):
                    early = point["step"]
            if checkpoint and at_point:  # also without a held-out slice
                kept = keep(curve + [point])
            if on_step:
                on_step(point)
        except KeyboardInterrupt:
            if checkpoint and curve and (kept is None or curve[-1]["step"] > kept):  # whole steps not yet kept
                before.restore(params, optimizer)
                keep(curve)
            raise
        step, last_loss = point["step"], loss
        curve.append(point)

    return TuneResult(part if isinstance(part, SoftPrompt) else None, curve, step,
                      last_loss if last_loss is None or math.isfinite(last_loss) else None,
                      stopped, earlier_seconds + time.time() - started,
                      {**asdict(config), "tune_dtype_ran": precision.dtype_name(precision.model_dtype(tuner))},
                      resumed_at, early, sum(p.numel() for p in params.values()))


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
