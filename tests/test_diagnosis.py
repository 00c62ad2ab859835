"""Why an output failed the format (softeval.diagnosis): each cause comes from an output built for it,
a chain of thought cut off by the token limit is that, not a style failure, and an output that marked its answer
and ran on is a style failure."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from softeval.diagnosis import CAUSES, failure_cause
from softeval.run.scoring import score_output
from softeval.tasks.base import Example
from softeval.tasks.gsm8k import TASK as GSM8K
from softeval.tasks.math500 import TASK as MATH500
from softeval.tasks.mmlu import TASK as MMLU

MMLU_EXAMPLE = Example(id="q", fields={"question": "What is the capital of France?"}, gold="B",
                       options=("Berlin", "Paris", "Rome", "Madrid"))


@pytest.mark.parametrize("output,hit,cause", [
    ("   ", False, "empty"),
    ("Well, let me think about this one carefully", True, "max_new_tokens"),
    ("The answer is B", False, "wrong_style"),
    ("Paris", False, "wrong_style"),
    ("I'm sorry, I cannot help with that.", False, "refusal_or_echo"),
    ("Question: What is the capital of France?", True, "refusal_or_echo"),
    ("What is the capital of France? Hmm", False, "refusal_or_echo"),
    ("Hmm.", False, "other"),
    (" B", False, None),
])
def test_every_failure_cause_comes_from_a_constructed_output(output, hit, cause):
    sample = score_output(MMLU, MMLU_EXAMPLE, output)
    prompt = MMLU.instruction + "\n\n" + MMLU.render(MMLU_EXAMPLE)
    assert failure_cause(sample, prompt, MMLU_EXAMPLE.options, True, hit) == cause


def test_a_cut_off_chain_of_thought_is_a_token_limit_not_a_style_failure():
    example = Example(id="g", fields={"question": "Ann has 3 apples and buys 4. How many?"}, gold="7")
    sample = score_output(GSM8K, example, "She starts with 3 apples, then buys 4 more, so")
    assert failure_cause(sample, "Question: ...", (), False, True) == "max_new_tokens"
    assert failure_cause(sample, "Question: ...", (), False, False) == "wrong_style"
    assert set(CAUSES) == {"empty", "max_new_tokens", "wrong_style", "refusal_or_echo", "other"}


def test_an_answer_line_in_another_style_that_then_ran_on_is_a_style_failure():
    """Seen on a GSM8K soft prompt: "#### 4 pizzas", then the same line again to the token limit (revision 2 took no
    such line; revision 3 reads its 4, so here "the answer is"). It answered (a longer budget cures nothing):
    wrong_style, where an unmarked chain of thought cut off stays max_new_tokens."""
    example = Example(id="g", fields={"question": "How many pizzas?"}, gold="20")
    assert score_output(GSM8K, example, " 4 pizzas\n" + "#### 4 pizzas\n" * 40)["format_ok"]
    output = " 4 pizzas\n" + "The answer is 4 pizzas.\n" * 40
    sample = score_output(GSM8K, example, output)
    assert not sample["format_ok"] and GSM8K.answer_marked(output)
    assert failure_cause(sample, "Question: ...", (), False, True, GSM8K.answer_marked(output)) == "wrong_style"
    cut = "She starts with 3 apples, then buys 4 more, so"
    assert not GSM8K.answer_marked(cut) and MMLU.answer_marked is None


def test_a_math_solution_that_said_its_answer_unboxed_and_ran_on_is_a_style_failure():
    example = Example(id="m", fields={"problem": "What is 1/2 + 1/4?", "solution": "\\boxed{\\frac{3}{4}}"},
                      gold="\\frac{3}{4}")
    output = "We add the fractions. The answer is $\\frac{3}{4}$.\n" * 30
    sample = score_output(MATH500, example, output)
    assert not sample["format_ok"] and sample["lenient_correct"]
    assert failure_cause(sample, "Problem: ...", (), False, True, MATH500.answer_marked(output)) == "wrong_style"
    cut = "We add the fractions: \\boxed{\\frac{3"  # cut off inside its box: a longer budget would finish it
    assert not MATH500.answer_marked(cut)
    assert failure_cause(score_output(MATH500, example, cut), "Problem: ...", (), False, True,
                         MATH500.answer_marked(cut)) == "max_new_tokens"


@settings(max_examples=80, deadline=None)
@given(st.text(alphabet="abc 0123456789/.\n", max_size=40), st.sampled_from(["#### ", "The answer is "]),
       st.text(alphabet="abc 0123456789/.\n", max_size=40))
def test_property_an_output_that_marks_an_answer_it_gives_is_never_called_cut_off(before, mark, after):
    example = Example(id="g", fields={"question": "How many?"}, gold="7")
    output = before + mark + after
    sample = score_output(GSM8K, example, output)
    cause = failure_cause(sample, "Question: ...", (), False, True, GSM8K.answer_marked(output))
    assert GSM8K.answer_marked(output)
    if cause not in (None, "empty", "refusal_or_echo"):  # it answered (a number read) exactly when wrong_style
        assert (cause == "wrong_style") == (sample["lenient"] is not None)
