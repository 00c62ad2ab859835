"""The spread across prompt variants (analysis/spread.py): the statistics against a case computed by hand, the
bootstrap test's pairing, and the sentence rules for every input (hypothesis), K=1 and n=1 included."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runfactory import variant_run as run

from softeval.analysis.spread import MIN_ITEMS, MIN_VARIANTS, SpreadTest, sentence, spread_test, spread_tests, spreads


def test_the_statistics_against_a_hand_computed_case():
    # accuracies 0.5, 0.75, 1.0 across three variants: mean 0.75, std (ddof 1) 0.25
    runs = [run("zero-shot", 0, [True, True, False, False]), run("zero-shot", 1, [True, True, True, False]),
            run("zero-shot", 2, [True, True, True, True], strict=[True, False, False, False])]
    (found,) = spreads(runs)
    assert found.variants == (0, 1, 2) and found.n == 4 and found.task == "mmlu"
    assert found.accuracy.values == (0.5, 0.75, 1.0)
    assert found.accuracy.mean == pytest.approx(0.75)
    assert found.accuracy.low == 0.5 and found.accuracy.high == 1.0
    assert found.accuracy.std == pytest.approx(0.25)
    assert found.format_rate.values == (1.0, 1.0, 0.25)
    assert found.format_rate.std == pytest.approx(math.sqrt(((0.25) ** 2 * 2 + 0.5 ** 2) / 2))


def test_one_variant_has_no_spread():
    assert spreads([run("zero-shot", 0, [True]), run("soft-prompt", 0, [False])]) == []


def test_the_test_compares_the_soft_prompt_with_each_other_method_on_shared_items():
    rng = np.random.default_rng(1)
    n = 60
    flat = [list(rng.random(n) < 0.6) for _ in range(4)]  # the soft prompt: about 0.6 under every variant
    moving = [list(rng.random(n) < p) for p in (0.2, 0.5, 0.8, 0.95)]  # zero-shot: moves with the format
    runs = [run("soft-prompt", v, flat[v]) for v in range(4)] + [run("zero-shot", v, moving[v]) for v in range(4)]
    (test,) = spread_tests(runs)
    assert (test.method, test.baseline, test.k, test.n) == ("soft-prompt", "zero-shot", 4, n)
    mine = np.std([np.mean(c) for c in flat], ddof=1)
    theirs = np.std([np.mean(c) for c in moving], ddof=1)
    assert test.std == pytest.approx(mine) and test.baseline_std == pytest.approx(theirs)
    assert test.difference == pytest.approx(mine - theirs)
    assert test.low <= test.difference <= test.high and test.high < 0
    assert test.sentence.startswith("the soft prompt's accuracy moves less with the prompt's format than")
    assert spread_tests(runs) == [test]  # seeded: the same runs give the same interval
    # every resample falls below 0 here: p is bounded by the resamples, (0 + 1) / (2,000 + 1) twice, never 0
    assert test.p == pytest.approx(2 / 2001)


def test_only_the_variants_and_items_both_methods_scored_are_compared():
    soft = [run("soft-prompt", v, [True, False] * 15) for v in range(3)]
    zero = [run("zero-shot", v, [True] * 30 + [False] * 5) for v in (0, 1, 2, 5)]
    (test,) = spread_tests(soft + zero)
    assert test.k == 3 and test.n == 30


def spread_result(k: int, n: int, low: float, high: float) -> SpreadTest:
    return SpreadTest("m", "mmlu", 0, "soft-prompt", "zero-shot", k, n, 0.1, 0.2, (low + high) / 2, low, high, 0.5)


@settings(max_examples=300)
@given(st.integers(1, 12), st.integers(1, 500), st.floats(-1, 1), st.floats(-1, 1))
def test_a_sentence_claims_only_what_its_numbers_hold(k, n, a, b):
    low, high = min(a, b), max(a, b)
    said = sentence(spread_result(k, n, low, high))
    less, more = "moves less" in said, "moves more" in said
    if less:
        assert high < 0 and k >= MIN_VARIANTS and n >= MIN_ITEMS
    if more:
        assert low > 0 and k >= MIN_VARIANTS and n >= MIN_ITEMS
    if k < MIN_VARIANTS or n < MIN_ITEMS:
        assert said.startswith("spread not compared")
    elif low <= 0 <= high:
        assert said.startswith("no difference in spread shown")
    assert not (less and more)


def test_n_of_one_is_not_compared():
    one = [run("soft-prompt", v, [v % 2 == 0]) for v in range(3)] + [run("zero-shot", v, [True]) for v in range(3)]
    test = spread_test(one[:3], one[3:])
    assert test.n == 1 and test.low == test.high  # one item resampled: no spread at all, so no claim
    assert test.sentence.startswith("spread not compared: 1 shared item ")


@pytest.mark.parametrize(("baseline", "said"), [("few-shot", "than the shots':"),
                                                ("zero-shot", "than the bare prompt's:")])
def test_each_method_is_named_in_good_english(baseline, said):
    # the SmolLM2 SQuAD row read "moves more with the prompt's format than the shots's"
    test = SpreadTest("m", "squad", 0, "soft-prompt", baseline, 3, 100, 0.08, 0.02, 0.06, 0.01, 0.11, 0.01)
    assert test.sentence.startswith(f"the soft prompt's accuracy moves more with the prompt's format {said}")
