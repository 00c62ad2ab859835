"""What besides the method sets two runs apart (store.identity.setting_diff): the options both methods read, but
those a paired test accounts for; property: a run's settings under another method differ in nothing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from softeval.run.config import RunConfig
from softeval.store.identity import identity_diff, setting_diff

ZERO = RunConfig(model="m", task="gsm8k").options("zero-shot", here=False)
SOFT = RunConfig(model="m", task="gsm8k").options("soft-prompt", here=False)


def test_one_command_runs_differ_in_nothing_but_their_method():
    assert setting_diff(ZERO, SOFT) == []


def test_options_only_one_method_reads_and_the_scored_item_set_are_not_differences():
    soft = {**SOFT, "lr": 0.3, "steps": 40, "init": "instruction"}
    assert setting_diff({**ZERO, "limit": 100, "eval_batch_size": 4, "permutations": 2}, soft) == []


def test_shared_settings_and_an_unrecorded_task_revision_are_named():
    old = {k: v for k, v in ZERO.items() if k != "task_revision"}  # written before GSM8K's revision 2
    changed = (f"task_revision: not recorded -> {SOFT['task_revision']}, the task's definition changed "
               "(docs/reference/tasks.md)")
    assert setting_diff(old, SOFT) == [changed]
    assert setting_diff({**ZERO, "dtype": "bfloat16"}, SOFT) == [f"dtype: 'bfloat16' -> {SOFT['dtype']!r}"]


@given(st.sampled_from(["zero-shot", "few-shot", "soft-prompt", "lora"]),
       st.sampled_from(["zero-shot", "few-shot", "soft-prompt", "lora"]),
       st.integers(0, 3), st.sampled_from(["mmlu", "gsm8k", "boolq"]))
def test_property_the_same_settings_under_two_methods_differ_in_nothing(a, b, seed, task):
    config = RunConfig(model="m", task=task, seed=seed)
    assert setting_diff(config.options(a, here=False), config.options(b, here=False)) == []


def test_a_saved_soft_prompt_scored_again_reads_no_tuning_option():
    """`softeval eval --soft-prompt` tunes nothing: the tuning options it records (defaults: gsm8k's changed from
    lr 0.03 to 0.3) are not its identity; the soft prompt's digest is."""
    saved = {**SOFT, "soft_prompt": "sp", "soft_prompt_sha256": "a" * 64}
    old = {**saved, "lr": 0.03, "init": "vocab", "lr_schedule": "constant", "tune_dtype_resolved": "bfloat16"}
    del old["answer_share"]
    assert identity_diff(old, saved) == []
    assert identity_diff({**old, "soft_prompt_sha256": "b" * 64}, saved) == [
        "soft_prompt_sha256: the contents differ (bbbbbbbbbbbb… -> aaaaaaaaaaaa…)"]
    assert identity_diff({**SOFT, "lr": 0.03}, SOFT) == ["lr: 0.03 -> 0.3"]  # a tuned run reads it


def test_a_weighted_run_recorded_before_the_answer_line_lost_its_end_token_is_another_run():
    new = RunConfig(model="m", task="gsm8k").options("soft-prompt", here=False)  # worked solutions: a share
    assert new["answer_share"] == 0.5 and new["answer_line"] == 2
    old = {k: v for k, v in new.items() if k != "answer_line"}
    assert identity_diff(old, new) == ["answer_line: not recorded -> 2, what --answer-share weighs as the answer "
                                       "line changed (docs/reference/protocol.md)"]
    assert identity_diff({**old, "method": "zero-shot"}, {**new, "method": "zero-shot"}) == []  # not read
