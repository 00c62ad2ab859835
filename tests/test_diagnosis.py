"""Why an output failed the format (softeval.diagnosis): each cause comes from an output built for it,
and a chain of thought cut off by the token limit is that, not a style failure."""

from __future__ import annotations

import pytest

from softeval.diagnosis import CAUSES, failure_cause
from softeval.run.scoring import score_output
from softeval.tasks.base import Example
from softeval.tasks.gsm8k import TASK as GSM8K
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
