"""GSM8K's complete answer (``Task.answer_end``): generation ends at the line break after the first "#### N". What
it cuts off can never change a score: strict, lenient, format and accuracy read the same from the cut output as
from the whole, and the point does not move as the output goes on (the HF loop finds it while generating, vLLM
after: both give the same text)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from softeval.run.scoring import score_output
from softeval.tasks import get_task
from softeval.tasks.base import Example

TASK = get_task("gsm8k")
ITEM = Example(id="t/0", fields={"question": "How many?", "solution": "2 + 2 = 4\n#### 4"}, gold="4")
PIECES = st.sampled_from(["####", "#### ", "#", " ", "\n", "4", "12", "1,000", "-3", ".5", "$", "7.", "/15",
                          "dollars", "The answer is ", "x", ",", "."])
OUTPUTS = st.lists(PIECES, max_size=14).map("".join)


def _read(output: str) -> tuple:
    row = score_output(TASK, ITEM, output)
    return TASK.strict(output, ITEM), TASK.lenient(output, ITEM), row["format_ok"], row["correct"]


@settings(max_examples=400, deadline=None)
@given(OUTPUTS, OUTPUTS)
def test_what_the_answer_end_cuts_off_changes_nothing_read(head, tail):
    output = head + tail
    at = TASK.answer_end(output)
    if at is None:
        return
    assert output[at] == "\n"
    assert _read(output[:at]) == _read(output)
    assert TASK.answer_end(output[:at + 1]) == at  # found once the line break is written, and never moved
    if TASK.answer_end(head) is not None:
        assert TASK.answer_end(head) == at


def test_the_answer_end_of_outputs_seen():
    assert TASK.answer_end(" 2 + 2 = 4\n#### 4\n#### 4\n#### 4") == len(" 2 + 2 = 4\n#### 4")
    assert TASK.answer_end(" 2 + 2 = 4\n#### 4 pizzas\n#### 4") == len(" 2 + 2 = 4\n#### 4 pizzas")
    assert TASK.answer_end(" 2 + 2 = 4\n#### 4") is None  # the number may go on: "#### 45"
    assert TASK.answer_end(" #### \nso\n") is None  # "####" then no number on it: nothing read yet
    assert TASK.answer_end(" 40 minutes\n\nThe answer is 40.\n") is None  # lenient reads the last one: not final
