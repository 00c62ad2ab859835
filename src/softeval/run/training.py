"""What a method trains, through its part's interface (methods/part.py: the spec's maker builds the part, the one
tuning loop of run/tuning_loop.py tunes it), with a progress bar and a line per curve point, and how tuning went said.
``trainer`` gives the run of a method the part it trains, in the model for the run's duration."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from softeval.consoles import progress_bar
from softeval.constants import WORKED_SOLUTION
from softeval.lm.softprompt import init_source
from softeval.methods import MethodSpec, maker_of, spec_of
from softeval.methods.part import TrainedPart
from softeval.metrics import FOLLOWS_FORMAT
from softeval.run.config import OPTIONS, TARGET_DEFAULTS, RunConfig, spelled
from softeval.run.tuning_loop import Kept, TuneConfig, TunedPart, TuneResult, still_learning, tune

WORKED = TARGET_DEFAULTS[WORKED_SOLUTION]


def not_reached(curve: list[dict], method: str, cfg: RunConfig | None = None) -> str:
    """The end of a tuning whose held-out format never reached FOLLOWS_FORMAT: how far it got, and what to try (the
    method's spec's ``advice``; ``cfg``: the run's options; a run that tuned with the worked-solution defaults is told
    its spec's ``recipe_advice`` instead, where it has one)."""
    points = [p for p in curve if p.get("format_rate") is not None]
    if not points:
        return "not measured (no held-out slice: --curve-items 0)"
    best = max(points, key=lambda p: (p["format_rate"], -p["step"]))
    spec = spec_of(method)
    recipe = bool(spec.recipe_advice) and cfg is not None and tuned_with_the_recipe(cfg)
    return (f"not reached on the held-out slice (best {best['format_rate']:.2f} at step {best['step']}"
            f"{still_falling(curve)}): " + (spec.recipe_advice if recipe else advice(method)))


def advice(method: str) -> str:
    """What to try when ``method``'s tuning never reached the format (its spec's ``advice``, with the defaults for
    worked solutions where it names them)."""
    return spec_of(method).advice.format(worked=spelled(WORKED))


def tuned_with_the_recipe(cfg: RunConfig) -> bool:
    """The run tuned with the defaults for worked solutions; a warm start (--init from:PATH) counts with the rest of
    them, as it goes on from a trained part rather than starting from an init."""
    return all(getattr(cfg, key) == value or (key == "init" and init_source(cfg.init) is not None)
               for key, value in WORKED.items())


def reads_the_recipe(spec: MethodSpec) -> bool:
    """The method reads every option the defaults for worked solutions set (the soft prompt's)."""
    return all(key in spec.reads for key in WORKED)


def still_falling(curve: list[dict]) -> str:
    """``; its held-out loss was still falling (A at step S, B at step T)`` when the last curve point's held-out
    loss B is below the lowest earlier one A by more than early stop's EARLY_STOP_MIN_DELTA (``tune.still_learning``,
    the rule early stop reads: it was still learning when the steps ran out, so more steps or a warm start from
    the soft prompt may go on); else empty."""
    falling = still_learning(curve)
    if falling is None:
        return ""
    best, last = falling
    return (f"; its held-out loss was still falling ({best['held_out_loss']:.2f} at step {best['step']}, "
            f"{last['held_out_loss']:.2f} at step {last['step']})")


WORKED_LOOKING_CHARS = 100  # a median tuning target this long reads as a worked solution (GSM8K's 226, SQuAD's 16)


def worked_looking(task, train: list, cfg: RunConfig) -> str | None:
    """A warning when a task of one-line kind (an lm-eval task, a task file that does not say) has tuning targets
    that look like worked solutions (median WORKED_LOOKING_CHARS characters or more) and the run tunes with the
    one-line defaults: it names the recipe that learned such a format. None otherwise."""
    if not train or any(getattr(cfg, key) != OPTIONS[key].default for key in WORKED):
        return None
    targets = [task.target(example) for example in train]  # rendered once (a task file's are templates)
    median = sorted(map(len, targets))[len(targets) // 2]
    if median < WORKED_LOOKING_CHARS:
        return None
    lines = sum(1 for target in targets if "\n" in target.strip()) / len(targets)
    return (f"{task.name}'s tuning targets look like worked solutions (median {median} characters, {lines:.0%} of "
            f"several lines), yet this run tunes with the one-line defaults; if they are, the defaults for worked "
            f"solutions are {spelled(WORKED)} (a task file says target_kind: worked-solution; "
            f"docs/reference/protocol.md)")


@dataclass
class Trained:
    """What a method's run scores with and records of its training: the vectors put before each prompt (a soft
    prompt, on the model's device), results.json's ``tuning`` and the learning curve (None: it trained nothing)."""

    soft: torch.Tensor | None = None
    tuning: dict | None = None
    curve: list[dict] | None = None


class Untrained:
    """The part of a method that trains nothing."""

    def train(self, job, partial: Path, identity: dict) -> Trained:
        return Trained()


@dataclass
class PartRun:
    """A method's trained part in one run: tuned (or, where it was loaded from a saved one, scored as it is), then
    saved into the run's folder."""

    spec: MethodSpec
    part: TrainedPart

    def train(self, job, partial: Path, identity: dict) -> Trained:
        part, lm = self.part, job.lm
        if part.loaded_from is not None:
            tuning, curve = {"loaded_from": part.loaded_from}, None
        else:
            result = _tune(job, self.spec, partial, identity, part)
            tuning, curve = part.record(result.summary()), result.curve
        part.save(partial / self.spec.folder, lm, tuned_on(job.config))
        soft = part.soft
        return Trained(None if soft is None else soft.detach().to(lm.device), tuning, curve)


def tuned_on(cfg: RunConfig) -> dict:
    """What a saved trained part records of the run that tuned it."""
    return {"task": cfg.task, "seed": cfg.seed, "series": cfg.series, "step": cfg.step}


@contextmanager
def trainer(job, spec: MethodSpec) -> Iterator[Untrained | PartRun]:
    """The part ``spec``'s run trains, built by its maker (methods/part.py) and in the model while the run tunes and
    scores; taken out however it ends, so the next method, in this process, scores the model as loaded."""
    maker = maker_of(spec.name)
    if maker is None:
        yield Untrained()
        return
    instruction = job.task.instruction or ""
    with maker.attached(job.lm, job.config, spec.name, instruction, job.spelling) as part:
        yield PartRun(spec, part)


def _tune(job, spec: MethodSpec, partial: Path, identity: dict, part) -> TuneResult:
    cfg, console = job.config, job.console
    method = spec.name
    tcfg = TuneConfig.of(cfg, method, len(job.train))
    what = part.what
    if reads_the_recipe(spec) and job.task.target_kind == WORKED_SOLUTION:  # its tuning defaults are not the table's
        console.print(f"{job.task.name}'s targets are worked solutions: tuning with {spelled(cfg, WORKED)} (where not "
                      "given, the defaults for worked solutions: docs/reference/protocol.md)", markup=False,
                      highlight=False)
    elif reads_the_recipe(spec) and (hint := worked_looking(job.task, job.train, cfg)):
        console.print(hint, style="yellow", markup=False, highlight=False)
    with progress_bar(console) as bar:
        bar_id = bar.add_task(f"tuning {what}", total=tcfg.steps)

        def on_step(point: dict) -> None:
            bar.update(bar_id, completed=point["step"], description=f"tuning {what} (loss {point['loss']:.3f})")
            if point["format_rate"] is not None:  # a line per curve point, also in logs without a live bar
                held = point.get("held_out_loss")
                console.print(f"step {point['step']}/{tcfg.steps}: loss {point['loss']:.3f}, held-out tuning "
                              f"slice format_rate {point['format_rate']:.2f}, accuracy {point['accuracy']:.2f}"
                              + ("" if held is None else f", loss {held:.3f}"))

        kept = Kept(partial, identity, log=lambda message: console.print(message, style="yellow", markup=False))
        result = tune(job.lm, job.prompter, job.train, job.curve_items, tcfg, kept, on_step,
                      TunedPart(part, method, job.spelling))
    if result.stopped_early:
        console.print(f"[red]tuning stopped early:[/red] {result.stopped_early}")
    if result.early_stop_step is not None:
        console.print(f"early stop at step {result.early_stop_step} of {tcfg.steps}: the held-out slice follows the "
                      "format and its loss and format_rate have plateaued")
    loss = "-" if result.final_loss is None else f"{result.final_loss:.3f}"
    first = result.summary()["format_0.9_step"]
    steps = f"{result.steps_run} step{'' if result.steps_run == 1 else 's'}"
    console.print(f"tuned {steps} in {result.seconds:.0f}s ({result.trainable_parameters:,} "
                  f"trainable parameters); final loss {loss}; format_rate >= {FOLLOWS_FORMAT:g} "
                  + (f"first at step {first}" if first is not None else not_reached(result.curve, method, cfg)))
    return result
