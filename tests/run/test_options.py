"""The option table (run/config.py) is the one source of the flags, the sweep keys, the checks and
the tuning defaults: a default, range or choice written there is what every front end applies. How each
front end refuses a value outside them: tests/e2e/test_refusals.py (the command line and sweep files) and
tests/run/test_validate.py (the library)."""

import argparse
from dataclasses import fields, replace

import pytest

from softeval.cli import app
from softeval.run.config import BY_TARGET, COMMON, EVAL, OPTIONS, SWEEP_OPTIONS, TUNING, RunConfig, resolved_tune_dtype
from softeval.run.tuning_loop import TuneConfig
from softeval.sweep.entries import MODEL_KEYS, TASK_KEYS


def subcommand(name: str) -> argparse.ArgumentParser:
    actions = app.build_parser()._actions
    return next(a for a in actions if isinstance(a, argparse._SubParsersAction)).choices[name]


@pytest.mark.parametrize("command, groups", [("run", (COMMON, TUNING)), ("tune", (COMMON, TUNING)),
                                             ("eval", (COMMON, EVAL))])
def test_every_flag_is_its_table_row(command, groups):
    flags = {a.dest: a for a in subcommand(command)._actions if a.dest in OPTIONS}
    assert set(flags) == {k for k, o in OPTIONS.items() if o.where in groups}
    for key, action in flags.items():
        row = OPTIONS[key]
        assert action.option_strings[0] == row.flag
        assert action.required == row.required
        if row.by_target:  # not given: the task's default (test_target_defaults.py)
            assert action.default is BY_TARGET and getattr(RunConfig, key) is BY_TARGET
        elif not row.required:
            assert action.default == row.default and action.default == getattr(RunConfig, key)
        # a tuple, or the backend registry's live view of its names
        assert (tuple(action.choices) if action.choices else None) == (None if row.choices is None
                                                                       else tuple(row.choices))


def test_sweep_keys_and_tuning_defaults_come_from_the_table():
    assert set(SWEEP_OPTIONS) <= MODEL_KEYS and set(SWEEP_OPTIONS) <= TASK_KEYS
    assert {"model", "task", "out", "force", "seed", "soft_prompt", "kind"}.isdisjoint(SWEEP_OPTIONS)
    run = RunConfig(model="m", task="t")
    tuned = TuneConfig.of(run)
    # TuneConfig's defaults are RunConfig's; tuning gets --tune-dtype as this machine resolves it
    assert TuneConfig().tune_dtype == run.tune_dtype == "auto"
    assert tuned == replace(TuneConfig(), tune_dtype=resolved_tune_dtype(run))
    assert (tuned.num_tokens, tuned.steps, tuned.early_stop) == (run.tokens, run.steps, run.early_stop)
    assert [f.name for f in fields(RunConfig)][:2] == ["model", "task"]
    with pytest.raises(TypeError):
        RunConfig()  # model and task have no default
