"""BoolQ's cloze reference (softeval.tasks.boolq): its options are the words no and yes."""

from __future__ import annotations

from softeval.tasks.base import Example
from softeval.tasks.boolq import TASK


def test_boolq_cloze_scores_yes_and_no():
    example = Example(id="x", fields={"passage": "p", "question": "Is it?"}, gold="yes")
    assert TASK.cloze_options(example) == (["no", "yes"], 1)
    assert TASK.cloze(example).endswith("Question: Is it?\nAnswer:")
