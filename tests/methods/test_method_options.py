"""The options a method's spec reads are run options: each name in ``MethodSpec.reads`` and in the registry's option
tuples (METHOD_OPTIONS) is a field of RunConfig (run/config.py, the one option table) or one of the few identity keys
``RunConfig.options`` derives from such a field, so renaming an option there (``lora_rank``) without its spec leaves
no run identity silently keeping an option its method no longer reads, and fails here."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from softeval import methods
from softeval.methods import (
    ANSWER_LINE,
    LORA_OPTIONS,
    METHOD_OPTIONS,
    POOL_OPTIONS,
    SAVED_SOFT_PROMPT,
    SHOT_OPTIONS,
    SOFT_PROMPT_OPTIONS,
    TUNE_DTYPE_RESOLVED,
    TUNING_OPTIONS,
)
from softeval.run.config import RunConfig
from softeval.store import identity

FIELDS = frozenset(f.name for f in fields(RunConfig))

# The method options that are not fields: identity keys RunConfig.options writes beside the field they come from,
# each only when that field asks for it (store/identity.py says why each is part of a run's identity).
DERIVED = {
    TUNE_DTYPE_RESOLVED: "tune_dtype",  # --tune-dtype as this machine resolves it (options(here=True) only; a record
                                        # from before it: store.runs fills it from tuning.tune_dtype_ran)
    ANSWER_LINE: "answer_share",  # what the share weighs (lm.tuning_loss.ANSWER_LINE_REVISION), with a share only
    "soft_prompt_sha256": "soft_prompt",  # what the saved soft prompt's folder holds, with --soft-prompt only
}
GROUPS = {"TUNING_OPTIONS": TUNING_OPTIONS, "SOFT_PROMPT_OPTIONS": SOFT_PROMPT_OPTIONS,
          "SAVED_SOFT_PROMPT": SAVED_SOFT_PROMPT, "LORA_OPTIONS": LORA_OPTIONS, "SHOT_OPTIONS": SHOT_OPTIONS,
          "POOL_OPTIONS": POOL_OPTIONS}


def _groups_of(option: str) -> list[str]:
    return [name for name, group in GROUPS.items() if option in group]


def test_the_option_groups_are_method_options_once_each():
    named = [o for group in GROUPS.values() for o in group]
    assert sorted(named) == sorted(METHOD_OPTIONS), "METHOD_OPTIONS is the groups' union, each option in one group"


@pytest.mark.parametrize("group", GROUPS)
def test_each_option_a_group_names_is_a_run_option_or_derived_from_one(group):
    unknown = [o for o in GROUPS[group] if o not in FIELDS and o not in DERIVED]
    assert not unknown, f"methods.{group} names {unknown}: no RunConfig field (renamed?) and no derived identity key"


def test_each_option_a_registered_method_reads_is_a_run_option_or_derived_from_one():
    for spec in methods.specs():
        unknown = [o for o in spec.reads if o not in FIELDS and o not in DERIVED]
        assert not unknown, f"method {spec.name} reads {unknown}: no RunConfig field and no derived identity key"
        assert set(spec.reads) <= METHOD_OPTIONS


def test_a_derived_key_is_no_field_and_goes_with_the_field_it_comes_from():
    """A derived key sits in the group of its field, and a method reads both or neither: a method that read the share
    but not what it weighs would keep a run of the old answer line."""
    assert DERIVED.keys() <= METHOD_OPTIONS and not DERIVED.keys() & FIELDS
    assert set(DERIVED.values()) <= FIELDS
    for key, source in DERIVED.items():
        assert _groups_of(key) == _groups_of(source), (key, source)
        for spec in methods.specs():
            assert (key in spec.reads) == (source in spec.reads), (spec.name, key, source)
    assert identity.TUNE_DTYPE_RESOLVED == TUNE_DTYPE_RESOLVED and identity.MACHINE_RESOLVED == (TUNE_DTYPE_RESOLVED,)
    assert identity.ANSWER_LINE == ANSWER_LINE and ANSWER_LINE in identity.WHY_CHANGED


def test_the_derived_keys_are_exactly_the_method_options_a_run_records_beyond_its_fields(tmp_path: Path):
    """RunConfig.options writes each DERIVED key when its field asks for it and not otherwise; no other key it writes
    beyond the fields is a method option (those are every method's: the task's digest, its revision...)."""
    folder = tmp_path / "prompt"
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    asks = {TUNE_DTYPE_RESOLVED: ({}, True),  # tune_dtype resolved on the machine that runs it
            ANSWER_LINE: ({"answer_share": 0.5}, False), "soft_prompt_sha256": ({"soft_prompt": str(folder)}, False)}

    def derived(given: dict, here: bool) -> set[str]:
        config = RunConfig(**{"model": "m", "task": "mmlu", "answer_share": None, **given})
        return (config.options("soft-prompt", here=here).keys() - FIELDS) & METHOD_OPTIONS

    assert asks.keys() == DERIVED.keys()
    assert derived({}, here=False) == set()
    for key, (given, here) in asks.items():
        assert derived(given, here) == {key}
        assert set(given) <= {DERIVED[key]}
    every = {k: v for given, _ in asks.values() for k, v in given.items()}
    assert derived(every, here=True) == DERIVED.keys()
