"""Adversarial outputs for every task's strict and lenient extractors and matcher.

Each row: (output, expected strict answer, strict correct?, expected lenient answer, lenient correct?).
``None`` means "no answer found" (a format failure), kept apart from a wrong answer.
"""

from __future__ import annotations

import pytest

from softeval.run.scoring import score_output
from softeval.tasks import TASKS
from softeval.tasks.base import Example
from softeval.tasks.qa import f1_max, normalize_answer, token_f1

MC = Example(id="mc", fields={"question": "Capital of the UK?", "subject": "geo", "context": "c", "passage": "p"},
             gold="B", options=("Paris", "London", "Berlin", "Rome"))

LETTER_CASES = [
    ("B", "B", True, "B", True),
    ("   B", "B", True, "B", True),  # leading spaces
    (" B. London", "B", True, "B", True),
    ("(B)", "B", True, "B", True),
    ("B B B", "B", True, "B", True),  # repeated answer
    ("The answer is (B).", None, False, "B", True),
    ("The answer is C", None, False, "C", False),
    ("Answer: B", None, False, "B", True),
    ("Because London is the capital", None, False, "B", True),  # a letter inside a word; option text found
    ("Because", None, False, None, False),  # a letter inside a word and nothing else
    ("A good guess is London", None, False, "B", True),  # the article 'A' is no option letter
    ("A is correct", "A", False, "A", False),  # ... but 'A is' is the option
    ("I think A is right", None, False, "A", False),
    ("D or B", "D", False, "D", False),  # two letters: the first one is the answer
    ("C) Berlin", "C", False, "C", False),
    ("b", None, False, None, False),  # lower case is not the option letter
    ("E", None, False, None, False),  # outside the options
    ("", None, False, None, False),  # empty output
    ("London", None, False, "B", True),  # the option text only
    ("Paris or London", None, False, None, False),  # two option texts: ambiguous
]


@pytest.mark.parametrize("task_name", ["mmlu", "arc_challenge", "arc_easy", "hellaswag", "belebele"])
@pytest.mark.parametrize(("output", "strict", "strict_ok", "lenient", "lenient_ok"), LETTER_CASES)
def test_multiple_choice_letters(task_name, output, strict, strict_ok, lenient, lenient_ok):
    task = TASKS[task_name]
    assert task.multiple_choice
    sample = score_output(task, MC, output)
    assert (sample["strict"], sample["correct"]) == (strict, strict_ok)
    assert (sample["lenient"], sample["lenient_correct"]) == (lenient, lenient_ok)
    assert sample["format_ok"] is (strict is not None)


GSM = Example(id="g", fields={"question": "q", "solution": "s\n#### 1234"}, gold="1234")
GSM8K_CASES = [
    ("1,000 + 234 = 1,234\n#### 1,234", "1234", True, "1234", True),  # thousands comma
    ("#### 1234", "1234", True, "1234", True),
    ("   #### 1234  ", "1234", True, "1234", True),  # leading spaces
    ("#### $1,234.00", "1234", True, "1234", True),
    ("#### 1234.", "1234", True, "1234", True),
    ("#### 1234\n#### 12", "1234", True, "1234", True),  # the first "#### N" line counts (lm-eval's take-first)
    ("#### 12\n#### 1234", "12", False, "12", False),
    ("#### 1234\n\nStep 12: the model writes on", "1234", True, "1234", True),  # what follows is not read
    (" 1234\n\nShe has 1,000 + 234\n#### 1234", "1234", True, "1234", True),  # a blank line before the answer
    ("#### 2x + 43\n#### 1234", "2", False, "2", False),  # the first "#### N" wherever: lm-eval's strict-match reads 2
    ("The answer is 1234.", None, False, "1234", True),
    ("It costs 1,234 dollars in total", None, False, "1234", True),
    ("#### 1234 dollars", "1234", True, "1234", True),  # a unit after the number (revision 2 took no such line)
    ("So the total is 1234. #### 1234", "1234", True, "1234", True),  # not on its own line
    ("#### 1/15", "1", False, "1", False),  # a fraction: its numerator, as lm-eval's regex reads it
    ("The answer is 1234.", None, False, "1234", True),
    ("5 + 6 = 11, so 1234", None, False, "1234", True),
    ("#### -5", "-5", False, "-5", False),
    ("####", None, False, None, False),
    ("", None, False, None, False),
]


@pytest.mark.parametrize(("output", "strict", "strict_ok", "lenient", "lenient_ok"), GSM8K_CASES)
def test_gsm8k(output, strict, strict_ok, lenient, lenient_ok):
    sample = score_output(TASKS["gsm8k"], GSM, output)
    assert (sample["strict"], sample["correct"]) == (strict, strict_ok)
    assert (sample["lenient"], sample["lenient_correct"]) == (lenient, lenient_ok)


def math_example(gold: str) -> Example:
    return Example(id="m", fields={"problem": "p", "solution": f"\\boxed{{{gold}}}"}, gold=gold)


MATH_CASES = [  # (gold, output, strict, strict_ok, lenient, lenient_ok)
    ("\\frac{1}{2}", "So $x = \\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}", True, "\\frac{1}{2}", True),
    ("\\frac{1}{2}", "\\boxed{0.5}", "0.5", True, "0.5", True),  # \frac{1}{2} vs 0.5
    ("0.5", "\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", True, "\\frac{1}{2}", True),
    ("\\frac{1}{2}", "\\boxed{\\dfrac12}", "\\dfrac12", True, "\\dfrac12", True),
    ("\\frac{1}{2}", "\\boxed{1/2}", "1/2", True, "1/2", True),
    ("\\frac{1}{2}", "  \\boxed{ \\frac {1} {2} }", "\\frac {1} {2}", True, "\\frac {1} {2}", True),  # spaces
    ("\\frac{1}{2}", "The answer is 0.5", None, False, "0.5", True),
    ("\\frac{1}{2}", "so we get $\\frac{1}{2}$", None, False, "\\frac{1}{2}", True),
    ("\\frac{1}{2}", "\\boxed{\\frac{1}{2}} or \\boxed{3}", "3", False, "3", False),  # the last box counts
    ("\\frac{1}{2}", "\\boxed{\\frac{1}{2}}\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", True, "\\frac{1}{2}", True),
    ("5", "\\boxed{5\\text{ cm}}", "5\\text{ cm}", True, "5\\text{ cm}", True),  # units
    ("90", "\\boxed{90^\\circ}", "90^\\circ", True, "90^\\circ", True),
    ("2", "\\boxed{2.0}", "2.0", True, "2.0", True),  # trailing .0
    ("1234", "\\boxed{1,234}", "1,234", True, "1,234", True),
    ("\\text{Evelyn}", "\\boxed{\\text{Evelyn}}", "\\text{Evelyn}", True, "\\text{Evelyn}", True),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "\\boxed{(3,\\pi/2)}", "(3,\\pi/2)", True, "(3,\\pi/2)", True),
    ("\\sqrt{117}", "\\boxed{3\\sqrt{13}}", "3\\sqrt{13}", True, "3\\sqrt{13}", True),
    ("6-5i", "\\boxed{-5i+6}", "-5i+6", True, "-5i+6", True),
    ("x=3", "\\boxed{3}", "3", True, "3", True),
    ("\\frac{1}{3}", "\\boxed{0.333}", "0.333", False, "0.333", False),  # a rounded value is not equal
    ("(1,2)", "\\boxed{[1,2]}", "[1,2]", False, "[1,2]", False),  # open vs closed interval
    ("\\frac{1}{2}", "", None, False, None, False),
    ("1", "\\boxed{9^{9^{99}}}", "9^{9^{99}}", False, "9^{9^{99}}", False),  # huge: refused fast, not hung
    ("1", "\\boxed{__import__('os')}", "__import__('os')", False, "__import__('os')", False),
]


@pytest.mark.parametrize(("gold", "output", "strict", "strict_ok", "lenient", "lenient_ok"), MATH_CASES)
def test_math500(gold, output, strict, strict_ok, lenient, lenient_ok):
    sample = score_output(TASKS["math500"], math_example(gold), output)
    assert (sample["strict"], sample["correct"]) == (strict, strict_ok)
    assert (sample["lenient"], sample["lenient_correct"]) == (lenient, lenient_ok)


TRIVIA = Example(id="t", fields={"question": "q"}, gold="Sunset Boulevard",
                 aliases=("Sunset Blvd", "West Sunset Boulevard"))
TRIVIA_CASES = [  # (output, strict, strict_ok, lenient_ok, f1)
    ("Sunset Boulevard", "Sunset Boulevard", True, True, 1.0),
    ("   Sunset Boulevard", "Sunset Boulevard", True, True, 1.0),
    ("sunset blvd.", "sunset blvd", True, True, 1.0),  # an alias, other case and punctuation
    ("The Sunset Boulevard", "The Sunset Boulevard", True, True, 1.0),  # an article
    ("Answer: Sunset Blvd", "Sunset Blvd", True, True, 1.0),
    ('"Sunset Boulevard"', "Sunset Boulevard", True, True, 1.0),
    ("Sunset Boulevard\nIt opened in 1993.", "Sunset Boulevard", True, True, 1.0),
    ("The answer is Sunset Boulevard.", "The answer is Sunset Boulevard", False, True, 2 / 3),
    ("Sunset Boulevard Sunset Boulevard", "Sunset Boulevard Sunset Boulevard", False, True, 2 / 3),  # repeated
    ("Sunset", "Sunset", False, False, 2 / 3),
    ("\nSunset Boulevard", None, False, True, 0.0),  # not on the first line
    ("Cats", "Cats", False, False, 0.0),
    ("", None, False, False, 0.0),
]


@pytest.mark.parametrize(("output", "strict", "strict_ok", "lenient_ok", "f1"), TRIVIA_CASES)
def test_triviaqa(output, strict, strict_ok, lenient_ok, f1):
    sample = score_output(TASKS["triviaqa"], TRIVIA, output)
    assert (sample["strict"], sample["correct"], sample["lenient_correct"]) == (strict, strict_ok, lenient_ok)
    assert sample["f1"] == pytest.approx(f1)


SQUAD = Example(id="s", fields={"context": "c", "question": "q", "title": ""}, gold="23 years", aliases=("23",))
SQUAD_CASES = [
    ("23 years", "23 years", True, True, 1.0),
    (" 23", "23", True, True, 1.0),
    ("23 years.", "23 years", True, True, 1.0),
    ("about 23 years", "about 23 years", False, True, 0.8),
    ("twenty-three years", "twenty-three years", False, False, 0.5),
    ("", None, False, False, 0.0),
]


@pytest.mark.parametrize(("output", "strict", "strict_ok", "lenient_ok", "f1"), SQUAD_CASES)
def test_squad(output, strict, strict_ok, lenient_ok, f1):
    sample = score_output(TASKS["squad"], SQUAD, output)
    assert (sample["strict"], sample["correct"], sample["lenient_correct"]) == (strict, strict_ok, lenient_ok)
    assert sample["f1"] == pytest.approx(f1)


def test_squad_normalisation_is_the_official_one():
    assert normalize_answer("  The  Eiffel-Tower!! ") == "eiffeltower"
    assert normalize_answer("An apple a day") == "apple day"
    assert token_f1("the cat sat", "cat") == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert f1_max(None, SQUAD) == 0.0


BOOL = Example(id="b", fields={"passage": "p", "question": "q?"}, gold="no")
BOOLQ_CASES = [
    ("No", "no", True, "no", True),
    ("   no.", "no", True, "no", True),
    ("NO, it does not.", "no", True, "no", True),
    ("no no no", "no", True, "no", True),
    ("Yes", "yes", False, "yes", False),
    ("The answer is no", None, False, "no", True),
    ("False", None, False, "no", True),
    ("Nothing is certain", None, False, None, False),  # 'no' inside a word
    ("yes and no", "yes", False, "yes", False),
    ("", None, False, None, False),
]


@pytest.mark.parametrize(("output", "strict", "strict_ok", "lenient", "lenient_ok"), BOOLQ_CASES)
def test_boolq(output, strict, strict_ok, lenient, lenient_ok):
    sample = score_output(TASKS["boolq"], BOOL, output)
    assert (sample["strict"], sample["correct"]) == (strict, strict_ok)
    assert (sample["lenient"], sample["lenient_correct"]) == (lenient, lenient_ok)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_the_target_is_read_back_by_strict(name):
    """What the soft prompt is tuned to write passes the task's own strict extractor and matcher."""
    task = TASKS[name]
    example = {"mmlu": MC, "arc_challenge": MC, "arc_easy": MC, "hellaswag": MC, "belebele": MC, "gsm8k": GSM,
               "math500": math_example("\\frac{1}{2}"), "triviaqa": TRIVIA, "squad": SQUAD, "boolq": BOOL}[name]
    written = task.target(example)
    assert task.match(task.strict(written, example), example)


def test_gold_letter_parsing_is_one_function():
    """One rule (base.letter_gold) reads every multiple-choice gold: letter, option text, lower-case
    letter, index; MMLU, ARC, HellaSwag, Belebele and task files all go through it."""
    from softeval.errors import UserError
    from softeval.tasks import arc, belebele, custom, hellaswag, mmlu
    from softeval.tasks.base import letter_gold

    for module in (arc, belebele, custom, hellaswag, mmlu):
        assert module.letter_gold is letter_gold
    opts = ("red", "green", "blue")
    assert [letter_gold(a, opts, "f", 0) for a in ("B", "blue", "b", 0, "2")] == ["B", "C", "B", "A", "C"]
    assert letter_gold(1, 4, "f", 0, one_based=True) == "A"
    for bad in ("D", 3, -1, "purple", True):
        with pytest.raises(UserError, match="outside its 3 options"):
            letter_gold(bad, opts, "f", 0)
    row = {"question": "q", "choices": ["x", "y"], "answer": "b"}
    assert mmlu.to_example(row, "i", "f", 0).gold == "B"
