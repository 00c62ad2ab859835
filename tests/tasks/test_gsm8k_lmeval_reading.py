"""GSM8K's strict answer is read as lm-eval's gsm8k strict-match reads it (its filter and its exact_match settings,
taken from lm-eval's own gsm8k.yaml): on every output whose "#### " is followed by a plainly written integer,
both call the same outputs right; what else softeval takes is listed beside."""

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from softeval.tasks import get_task
from softeval.tasks.base import Example

lm_eval = pytest.importorskip("lm_eval")
from lm_eval.api.metrics import exact_match_hf_evaluate  # noqa: E402
from lm_eval.filters.extraction import RegexFilter  # noqa: E402

GSM8K = get_task("gsm8k")
SPEC = yaml.safe_load((Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml").read_text())
STRICT = next(f["filter"] for f in SPEC["filter_list"] if f["name"] == "strict-match")
METRIC = next(m for m in SPEC["metric_list"] if m["metric"] == "exact_match")


def lm_evals_strict_match(output: str, gold: str) -> bool:
    assert [step["function"] for step in STRICT] == ["regex", "take_first"]
    first = list(RegexFilter(regex_pattern=STRICT[0]["regex_pattern"]).apply([[output]], [{}]))[0][0]
    reference = f"solution\n#### {gold}"  # lm-eval's reference is the whole answer; its regexes keep the number
    settings_ = {k: METRIC[k] for k in ("regexes_to_ignore", "ignore_case", "ignore_punctuation")}
    return bool(exact_match_hf_evaluate([first], [reference], **settings_)["exact_match"] == 1.0)


def softevals_strict(output: str, gold: str) -> bool:
    example = Example(id="g", fields={"question": "q", "solution": f"s\n#### {gold}"}, gold=gold)
    return GSM8K.match(GSM8K.strict(output, example), example)


PART = st.one_of(st.integers(-60, 60).map(lambda n: f"#### {n}"), st.text(alphabet="ab \n0123456789.,:", max_size=8))


@settings(max_examples=300, deadline=None)
@given(st.lists(PART, max_size=6), st.integers(-60, 60))
def test_property_where_lm_eval_reads_an_integer_softeval_scores_the_same(parts, gold):
    output = " ".join(parts)
    assert softevals_strict(output, str(gold)) == lm_evals_strict_match(output, str(gold))


@pytest.mark.parametrize(("output", "right"), [
    ("#### 7 pizzas", True), ("We get 3 + 4 = 7. #### 7", True), ("#### 7\n#### 7\n#### 7", True),
    ("#### 7, so she has 7", True), ("#### 2x\n#### 7", False), ("#### 7/15", True), ("7\n\n#### 8", False)])
def test_revision_3_takes_what_lm_eval_takes(output, right):  # a unit, a fraction, the line again: the first N
    assert softevals_strict(output, "7") is lm_evals_strict_match(output, "7") is right


@pytest.mark.parametrize("output", ["####7", "####  7", "#### $7", "#### 7.00", "#### 7.."])
def test_softeval_also_reads_a_number_lm_evals_regex_or_string_match_misses(output):
    assert softevals_strict(output, "7") and not lm_evals_strict_match(output, "7")
