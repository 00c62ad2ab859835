"""`softeval testbed`, phase by phase: the worlds and their task files, pre-training, post-training, the
comparison through softeval's own sweep, then the statistics into `testbed.json`. Every phase skips what a
previous (perhaps killed) testbed in the same output root finished, so running it again continues."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from softeval.analysis.compare import load_runs
from softeval.consoles import progress_bar, table_console
from softeval.errors import UserError
from softeval.store.format import REPORT_FILE, TESTBED_FILE, TESTBED_FOLDER
from softeval.sweep.driver import run_sweep
from softeval.sweep.file import load_sweep
from softeval.testbed.build import build_base, build_post, model_name, write_task
from softeval.testbed.recipes import Recipe
from softeval.testbed.recipes import recipes as recipe_list
from softeval.testbed.summary import print_summary, summarize, world_scores
from softeval.testbed.sweepfile import write_sweep
from softeval.testbed.world import World, make_world

SETTINGS_FILE = "settings.json"  # in the testbed folder: what the models and runs there were made with


@dataclass(frozen=True)
class Settings:
    quick: bool
    world_seeds: tuple[int, ...]
    people: int
    steps: int  # soft-prompt tuning steps (softeval run --steps)
    exposure_scale: float = 1.0
    n_boot: int = 1000
    variants: int = 1  # prompt variants 0 to variants-1 each base model is scored under (tasks/variants.py)

    def to_json(self) -> dict:
        return {"quick": self.quick, "world_seeds": list(self.world_seeds), "people": self.people,
                "steps": self.steps, "exposure_scale": self.exposure_scale, "prompt_variants": self.variants}


def run_testbed(out: Path, settings: Settings, console: Console, max_parallel: int | None = None) -> dict:
    """``_run_testbed`` with transformers' bars off (the testbed draws its own) and one torch thread (tiny
    models train fastest so, leaving the other cores to others); both put back after, as they were."""
    import torch
    from transformers.utils import logging as hf_logging

    bars_on, threads = hf_logging.is_progress_bar_enabled(), torch.get_num_threads()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)
    try:
        return _run_testbed(out, settings, console, max_parallel)
    finally:
        torch.set_num_threads(threads)
        if bars_on:
            hf_logging.enable_progress_bar()


def _run_testbed(out: Path, settings: Settings, console: Console, max_parallel: int | None) -> dict:
    _claim(out / TESTBED_FOLDER, settings)
    bed = _Testbed(out, settings, console, max_parallel)
    started = time.perf_counter()
    for w in bed.worlds:  # world by world, so that a world's comparison is finished before the next one starts
        task = write_task(w, bed.folder / f"w{w.seed}")
        bed.train(w)
        bed.compare(w, task)
    summary = bed.summary(started)
    path = out / TESTBED_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    tmp.replace(path)
    from softeval.analysis.report import build_report  # lazy: it imports matplotlib, slow to import

    # no --pair ranking: compare ranks every pair on every task, and each world's pairs have runs on its own
    # task only; the testbed section holds the ranking, per world and over worlds
    report = build_report(out, out / REPORT_FILE)
    print_summary(table_console(), summary, path)
    console.print(f"report with the testbed section: {report}", markup=False, highlight=False, soft_wrap=True)
    return summary


class _Testbed:
    """The phases of one testbed: its worlds, each recipe's base and post-trained model folders in each world
    (``base_dirs``, ``post_dirs``, by (world seed, recipe name)), what pre-training noted of each (``notes``)
    and the seconds each phase took (``timing``)."""

    def __init__(self, out: Path, settings: Settings, console: Console, max_parallel: int | None) -> None:
        self.out, self.folder, self.settings = out, out / TESTBED_FOLDER, settings
        self.console, self.max_parallel = console, max_parallel
        self.recipes = recipe_list(settings.quick, settings.exposure_scale)
        self.worlds = [make_world(s, n_people=settings.people) for s in settings.world_seeds]
        self.timing = {"pre_training_s": 0.0, "post_training_s": 0.0, "comparison_s": 0.0}
        self.base_dirs = {(w.seed, r.name): self.folder / f"w{w.seed}" / model_name(w, r)
                          for w in self.worlds for r in self.recipes}
        self.post_dirs = {(w.seed, r.name): self.folder / f"w{w.seed}" / model_name(w, r, post=True)
                          for w in self.worlds for r in self.recipes}
        self.notes: dict[int, dict[str, dict]] = {w.seed: {} for w in self.worlds}

    def train(self, w: World) -> None:
        """World ``w``'s models: each recipe's pre-training, then its post-training, a bar for each model."""
        clock = time.perf_counter()
        with progress_bar(self.console) as bar:
            for phase, dirs in (("pre-training", self.base_dirs), ("post-training", self.post_dirs)):
                overall = bar.add_task(f"world {w.seed}: {phase}", total=len(self.recipes))
                for r in self.recipes:
                    step = bar.add_task(f"  {dirs[w.seed, r.name].name}", total=None)

                    def on_step(n: int, total: int, step=step) -> None:
                        bar.update(step, completed=n, total=total)

                    self._build(phase, w, r, on_step)
                    bar.update(step, visible=False)
                    bar.advance(overall)
                key = "pre_training_s" if phase == "pre-training" else "post_training_s"
                self.timing[key] += time.perf_counter() - clock
                clock = time.perf_counter()

    def _build(self, phase: str, w: World, r: Recipe, on_step: Callable[[int, int], None]) -> None:
        """Recipe ``r``'s model of world ``w`` in ``phase``: its base model (pre-training; what it noted kept in
        ``notes``) or its post-trained one."""
        base, post = self.base_dirs[w.seed, r.name], self.post_dirs[w.seed, r.name]
        if phase == "pre-training":
            self.notes[w.seed][r.name] = build_base(w, r, base, w.seed, on_step)
        else:
            build_post(w, r, base, post, w.seed, on_step)

    def compare(self, w: World, task: Path) -> None:
        """World ``w``'s comparison: a sweep of every recipe's base/post-trained pair on its task (``task``)."""
        clock = time.perf_counter()
        self.console.print(f"world {w.seed}: the comparison, through softeval's sweep", markup=False,
                           highlight=False)
        pairs = [(self.base_dirs[w.seed, r.name], self.post_dirs[w.seed, r.name]) for r in self.recipes]
        sweep = load_sweep(write_sweep(self.out, w.seed, task, pairs, {"steps": self.settings.steps},
                                       self.settings.variants))
        result = run_sweep(sweep, max_parallel=self.max_parallel, console=self.console)
        self.timing["comparison_s"] += time.perf_counter() - clock
        if result.failed:
            raise UserError(f"testbed: {len(result.failed)} run(s) of world seed {w.seed} failed (the sweep table "
                            f"above names them; logs in {self.out}/.sweep/logs): fix the cause and run again")

    def summary(self, started: float) -> dict:
        """What `testbed.json` holds: the statistics of every world's runs, the settings and the timing
        (``started``: ``time.perf_counter()`` when the testbed started)."""
        runs = load_runs(self.out, keep_samples=True)[0]
        per_variant = [[world_scores(runs, w.seed, self.recipes,
                                     {r.name: (self.base_dirs[w.seed, r.name].name, self.post_dirs[w.seed, r.name].name)
                                      for r in self.recipes}, self.notes[w.seed], variant) for w in self.worlds]
                       for variant in range(self.settings.variants)]
        scored = per_variant[0]
        timing = {k: round(v, 1) for k, v in self.timing.items()} | {
            "total_s": round(time.perf_counter() - started, 1)}
        return summarize(scored, self.recipes, self.notes, {w.seed: w.chance() for w in self.worlds},
                         self.settings.to_json(), self.settings.n_boot, timing, per_variant)


def _same_models(settings: dict) -> dict:
    """What the models and runs of a world depend on: every setting but the list of world seeds (each world
    is made alone, so `--seeds 0` then `--seeds 0,1,2` in one output root reuses world 0) and the number of prompt
    variants (variant N's runs are the same whichever number asked for them)."""
    return {k: v for k, v in settings.items() if k not in ("world_seeds", "prompt_variants")}


def _claim(folder: Path, settings: Settings) -> None:
    """A testbed folder holds the models of one setting: another setting there is refused, not mixed."""
    path = folder / SETTINGS_FILE
    if path.is_file():
        try:
            held = json.loads(path.read_text())
        except ValueError:
            held = None
        if not isinstance(held, dict) or _same_models(held) != _same_models(settings.to_json()):
            raise UserError(f"testbed: {folder.parent} holds a testbed made with other settings ({held}); "
                            "give another --out, or the same flags as then (--seeds may differ)")
        return
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings.to_json()) + "\n")
