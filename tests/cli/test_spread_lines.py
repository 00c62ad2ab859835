"""`softeval compare`'s spread lines (cli/spread.py): a root of several models and tasks prints one test per row and
pair of methods, so each line names the model and task it is about, and the seed where there are several."""

from __future__ import annotations

import io

import numpy as np
from rich.console import Console
from runfactory import variant_run as run

from softeval.analysis.spread import spread_tests, spreads
from softeval.cli.spread import print_spread


def _lines(runs) -> list[str]:
    console = Console(file=io.StringIO(), width=400)
    print_spread(console, spreads(runs), spread_tests(runs))
    return [line for line in console.file.getvalue().splitlines() if line.startswith("spread, ")]


def test_each_spread_line_names_its_model_and_task_and_the_seed_where_there_are_several():
    rng = np.random.default_rng(0)
    runs = [run(method, v, list(rng.random(30) < 0.5), task=task, seed=seed)
            for task in ("mmlu", "arc_easy") for method in ("zero-shot", "soft-prompt") for v in range(3)
            for seed in (0,)]
    lines = _lines(runs)
    assert [line.split(":")[0] for line in lines] == ["spread, m on arc_easy, soft-prompt vs zero-shot",
                                                      "spread, m on mmlu, soft-prompt vs zero-shot"]
    runs += [run(method, v, list(rng.random(30) < 0.5), seed=1) for method in ("zero-shot", "soft-prompt")
             for v in range(3)]
    assert [line.split(":")[0] for line in _lines(runs)] == [
        "spread, m on arc_easy, seed 0, soft-prompt vs zero-shot",
        "spread, m on mmlu, seed 0, soft-prompt vs zero-shot", "spread, m on mmlu, seed 1, soft-prompt vs zero-shot"]
