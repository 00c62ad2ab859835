"""The tuned methods of a run: tune its soft prompt (soft-prompt) or its LoRA adapter (lora) with the one
tuning loop (run/tune.py), with a progress bar and a line per curve point, and say how tuning went."""

from __future__ import annotations

from pathlib import Path

from softeval.consoles import progress_bar
from softeval.lm.lora import LoraAdapter, LoraSettings, parse_targets
from softeval.lm.softprompt import SoftPrompt, init_record, init_source
from softeval.metrics import FOLLOWS_FORMAT
from softeval.protocol import WORKED_SOLUTION
from softeval.run.config import OPTIONS, TARGET_DEFAULTS, RunConfig, spelled
from softeval.run.tune import TuneConfig, TuneResult, still_learning, tune

WORKED = TARGET_DEFAULTS[WORKED_SOLUTION]
ADVICE = {  # what to try when the held-out format was never reached, per method
    "soft-prompt": "the soft prompt did not learn the format, so its scores are not format-free; try more --steps, "
                   "another --lr, --init instruction or --init text:\"<the answer format>\", and where the targets "
                   f"are worked solutions {spelled(WORKED)} (docs/design.md, defaults by kind of target)",
    "lora": "the adapter did not learn the format, so its scores are not format-free; try more --steps (or --epochs), "
            "another --lora-lr, and --answer-share 0.5 where the targets are worked solutions (docs/design.md, "
            "train-before-test)",
}


# the soft prompt's advice when it already tuned with the defaults for worked solutions: those are not news
AFTER_THE_RECIPE = ("the soft prompt did not learn the format, so its scores are not format-free; it tuned with the "
                    "defaults for worked solutions already: try more --steps (or go on from it: --init "
                    "from:<its soft_prompt folder>), another --seed or --lr, or --init text:\"<the answer format>\" "
                    "(docs/design.md, defaults by kind of target)")


def not_reached(curve: list[dict], method: str = "soft-prompt", cfg: RunConfig | None = None) -> str:
    """The end of a tuning whose held-out format never reached FOLLOWS_FORMAT: how far it got, and what to try
    (``cfg``: the run's options; a soft prompt that tuned with the worked-solution defaults is not told them)."""
    points = [p for p in curve if p.get("format_rate") is not None]
    if not points:
        return "not measured (no held-out slice: --curve-items 0)"
    best = max(points, key=lambda p: (p["format_rate"], -p["step"]))
    recipe = method == "soft-prompt" and cfg is not None and tuned_with_the_recipe(cfg)
    return (f"not reached on the held-out slice (best {best['format_rate']:.2f} at step {best['step']}"
            f"{still_falling(curve)}): " + (AFTER_THE_RECIPE if recipe else ADVICE[method]))


def tuned_with_the_recipe(cfg: RunConfig) -> bool:
    """The run's soft prompt tuned with the defaults for worked solutions; a warm start (--init from:PATH) counts
    with the rest of them, as it goes on from a soft prompt rather than starting from an init."""
    return all(getattr(cfg, key) == value or (key == "init" and init_source(cfg.init) is not None)
               for key, value in WORKED.items())


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
            f"solutions are {spelled(WORKED)} (a task file says target_kind: worked-solution; docs/design.md)")


def lora_settings(cfg: RunConfig) -> LoraSettings:
    """The adapter a lora run of ``cfg`` tunes (its --lora-* options)."""
    return LoraSettings(rank=cfg.lora_rank, alpha=float(cfg.lora_alpha), dropout=float(cfg.lora_dropout),
                        targets=parse_targets(cfg.lora_targets))


def tune_soft_prompt(job, partial: Path, identity: dict) -> tuple[SoftPrompt, dict, list[dict]]:
    """Tune the soft prompt of ``job`` (a pipeline.Job); its tuning summary (results.json ``tuning``), curve."""
    result = _tune(job, partial, identity, None)
    summary = result.summary()
    if init_record(job.config.init) is not None:  # the warm start: source folder, digest, what it was tuned on
        summary["init_from"] = init_record(job.config.init)
    return result.soft, summary, result.curve


def tune_lora(job, adapter: LoraAdapter, partial: Path, identity: dict) -> tuple[dict, list[dict]]:
    """Tune ``adapter``, already in the model of ``job``; its tuning summary and curve."""
    result = _tune(job, partial, identity, adapter)
    summary = result.summary()
    for key in ("num_tokens", "init"):  # the soft prompt's settings, which a lora run does not read
        summary.pop(key, None)
    summary["lora"] = adapter.settings.record()
    return summary, result.curve


def _tune(job, partial: Path, identity: dict, part) -> TuneResult:
    cfg, console = job.config, job.console
    method = "soft-prompt" if part is None else part.method
    tcfg = TuneConfig.of(cfg, method, len(job.train))
    what = "soft prompt" if part is None else "LoRA adapter"
    if part is None and job.task.target_kind == WORKED_SOLUTION:  # its tuning defaults are not the table's
        console.print(f"{job.task.name}'s targets are worked solutions: tuning with {spelled(cfg, WORKED)} (where not "
                      "given, the defaults for worked solutions: docs/design.md)", markup=False, highlight=False)
    elif part is None and (hint := worked_looking(job.task, job.train, cfg)):
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

        result = tune(job.lm, job.prompter, job.train, job.curve_items, tcfg, checkpoint=partial, on_step=on_step,
                      identity=identity, log=lambda message: console.print(message, style="yellow", markup=False),
                      name=job.spelling, part=part)
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
