"""The verdict rules (docs/reference/verdicts.md) on synthetic per-item outcomes: each rule fires
where it should and nowhere else, and a difference whose interval touches 0 never reads as a change."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runfactory import Extras, Items, write_run

from softeval.analysis.compare import load_runs
from softeval.analysis.paired import mcnemar_exact, paired_test
from softeval.analysis.verdict import ALPHA, Side, items_to_detect, judge, verdicts
from softeval.cli import analysis as cli_analysis

CHANGES = {"label-prior", "format-hid-knowledge", "better-answers", "worse"}


def table(both: int, a_only: int, b_only: int, neither: int):
    """Per-item outcomes of methods A and B with exactly these 2x2 counts."""
    a, b = {}, {}
    for i, (x, y) in enumerate([(1, 1)] * both + [(1, 0)] * a_only + [(0, 1)] * b_only + [(0, 0)] * neither):
        a[str(i)], b[str(i)] = bool(x), bool(y)
    return paired_test("zero-shot", "soft-prompt", a, b)


def side(method: str, fmt: float, n: int, top: str | None = "A", count: int = 10, gold: int = 13,
         consistency: float | None = None) -> Side:
    return Side(method, fmt, top, count, gold, n, consistency)


def test_format_hid_knowledge():
    test = table(both=5, a_only=0, b_only=13, neither=32)  # 0.10 -> 0.36 on 50 items
    rule, sentence = judge(test, side("zero-shot", 0.56, 50), side("soft-prompt", 0.92, 50))
    assert rule == "format-hid-knowledge"
    assert "recovered" in sentence


def test_label_prior_wins_over_knowledge():
    test = table(both=5, a_only=0, b_only=13, neither=32)
    prior = side("soft-prompt", 1.0, 50, top="B", count=31, gold=14, consistency=0.02)
    rule, sentence = judge(test, side("zero-shot", 0.56, 50), prior)
    assert rule == "label-prior"
    assert "B 31/50" in sentence and "permutation consistency 0.02" in sentence
    # the same share of one answer is no prior when the gold answers are as lopsided (BoolQ's yes)
    rule, _ = judge(test, side("zero-shot", 0.56, 50), side("soft-prompt", 1.0, 50, top="yes", count=31, gold=30))
    assert rule == "format-hid-knowledge"


def test_no_answer_is_not_a_prior(tmp_path):
    """A run whose commonest strict answer is 'none found' (free-form tasks) has no label prior."""
    n = 40
    write_run(tmp_path, "m", "t", "zero-shot", [False] * n, items=Items(format_ok=[i < 10 for i in range(n)]))
    write_run(tmp_path, "m", "t", "soft-prompt", [i < 20 for i in range(n)],
              items=Items(format_ok=[i < 30 for i in range(n)]))
    runs, _ = load_runs(tmp_path)
    (verdict,) = verdicts(runs)
    assert verdict.treated.top_answer != "None" and verdict.rule == "format-hid-knowledge"


def test_better_answers_when_format_was_followed():
    test = table(both=20, a_only=2, b_only=16, neither=62)  # format already there, answers improve
    rule, sentence = judge(test, side("zero-shot", 0.97, 100), side("soft-prompt", 0.99, 100))
    assert rule == "better-answers" and "already followed" in sentence


def test_worse():
    test = table(both=10, a_only=15, b_only=1, neither=24)
    rule, sentence = judge(test, side("zero-shot", 0.98, 50), side("soft-prompt", 1.0, 50))
    assert rule == "worse" and "zero-shot is the better prompt" in sentence


def test_format_fixed_accuracy_within_noise():
    test = table(both=8, a_only=4, b_only=6, neither=32)
    rule, sentence = judge(test, side("zero-shot", 0.5, 50), side("soft-prompt", 1.0, 50))
    assert rule == "format-only"
    assert sentence.startswith("the soft prompt fixed the format (0.50 → 1.00); +0.04 in accuracy is within noise")
    assert "would detect" in sentence
    test = table(both=8, a_only=5, b_only=5, neither=32)
    _, sentence = judge(test, side("zero-shot", 0.5, 50), side("soft-prompt", 0.9, 50))
    assert sentence.startswith("the soft prompt fixed the format (0.50 → 0.90); no difference in accuracy at this n")


def test_a_rise_below_the_threshold_is_partial():
    test = table(both=8, a_only=4, b_only=6, neither=32)
    rule, sentence = judge(test, side("zero-shot", 0.5, 50), side("soft-prompt", 0.88, 50))
    assert rule == "format-partial" and "fixed" not in sentence
    assert sentence.startswith("the soft prompt raised the format from 0.50 to 0.88 but did not reach 0.90; ")
    test = table(both=5, a_only=0, b_only=13, neither=32)  # significant gain, format short of 0.90
    rule, sentence = judge(test, side("zero-shot", 0.56, 50), side("soft-prompt", 0.78, 50))
    assert rule == "format-hid-knowledge"
    assert sentence.endswith("recovered some of it, raising the format from 0.56 to 0.78 without reaching 0.90")


def test_an_interval_clear_of_zero_without_the_exact_test_is_no_change():
    """6 against 16 discordant of 161 (contingencytables' example): interval clear of 0, exact p 0.052."""
    test = table(both=59, a_only=6, b_only=16, neither=80)
    assert test.ci_low > 0 and test.p_value > ALPHA
    rule, sentence = judge(test, side("zero-shot", 0.7, 161), side("few-shot", 0.75, 161))
    assert rule == "no-difference"
    assert sentence.startswith("+0.06 in accuracy, its interval clear of 0 but McNemar's exact p 0.052: too few")


def test_post_trained_model_already_followed_the_format():
    """The README's SmolLM2 run: 0.33 -> 0.27 on 100 MMLU items, format 0.98 -> 1.00: no claim either way."""
    test = table(both=17, a_only=16, b_only=10, neither=57)
    assert test.p_value > ALPHA
    rule, sentence = judge(test, side("zero-shot", 0.98, 100), side("soft-prompt", 1.0, 100, top="A", count=53,
                                                                        gold=30))
    assert rule == "format-already-followed"
    assert "-0.06 in accuracy is within noise at this n" in sentence
    assert "label prior" in sentence  # A 53/100 against gold 30


def test_no_difference_names_the_n_that_would_detect():
    test = table(both=10, a_only=5, b_only=7, neither=28)
    rule, sentence = judge(test, side("zero-shot", 0.7, 50), side("few-shot", 0.75, 50))
    assert rule == "no-difference"
    assert f"n ≈ {items_to_detect(test, 0.05)} would detect +0.05" in sentence


def test_a_run_with_enough_items_says_it_would_have_detected_the_difference():
    test = table(both=2, a_only=1, b_only=1, neither=196)  # 200 items, 1% discordant: ~155 detect +0.05
    need = items_to_detect(test, 0.05)
    assert need < 200
    rule, sentence = judge(test, side("zero-shot", 0.1, 200), side("soft-prompt", 0.12, 200))
    assert rule == "no-difference"
    assert sentence == ("no difference in accuracy at this n "
                        f"(its 200 items would have detected +0.05, which needs n ≈ {need})")


def test_items_to_detect_has_the_power_it_claims():
    """At the n it names, McNemar's exact test finds the difference about 80% of the time (simulated)."""
    test = table(both=30, a_only=5, b_only=15, neither=50)  # discordant share 0.2
    n = items_to_detect(test, 0.1)
    assert n == 155  # (1.96 * 0.2**0.5 + 0.8416 * 0.19**0.5)**2 / 0.01 = 154.6
    rng = np.random.default_rng(0)
    # discordant items with P(B only) - P(A only) = 0.1 and their sum 0.2
    hits = 0
    for _ in range(400):
        cells = rng.multinomial(n, [0.05, 0.15, 0.8])
        hits += mcnemar_exact(int(cells[0]), int(cells[1])) < ALPHA
    assert 0.65 < hits / 400 < 0.9


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40), st.integers(0, 40), st.integers(0, 40),
       st.floats(0, 1), st.floats(0, 1), st.integers(0, 60))
def test_a_change_is_claimed_only_when_the_test_carries_it(both, a_only, b_only, neither, f0, f1, top):
    n = both + a_only + b_only + neither
    if n == 0:
        return
    test = table(both, a_only, b_only, neither)
    rule, sentence = judge(test, side("zero-shot", f0, n), side("soft-prompt", f1, n, count=min(top, n), gold=1))
    said_up = "more answers are right" in sentence and "no more answers" not in sentence
    said_down = "scored lower" in sentence
    if test.p_value >= ALPHA or test.ci_low <= 0 <= test.ci_high:
        assert rule not in CHANGES and not said_up and not said_down
    elif test.difference > 0:
        assert rule in {"label-prior", "format-hid-knowledge", "better-answers"} or (rule == "format-broken"
                                                                                     and said_up)
    else:
        assert rule == "worse" or (rule == "format-broken" and said_down)


def test_verdicts_read_run_folders(tmp_path):
    """Soft-prompt against zero-shot and few-shot (not few-shot against zero-shot); the cloze reference
    comes from the zero-shot run; the lowest seed of each method is compared."""
    n = 60
    write_run(tmp_path, "gemma", "arc", "zero-shot", [i < 8 for i in range(n)],
              items=Items(format_ok=[i < 33 for i in range(n)], cloze_correct=[i < 36 for i in range(n)]))
    write_run(tmp_path, "gemma", "arc", "few-shot", [i < 12 for i in range(n)])
    write_run(tmp_path, "gemma", "arc", "soft-prompt", [i < 30 for i in range(n)])
    write_run(tmp_path, "gemma", "arc", "soft-prompt", [False] * n, seed=1)
    runs, _ = load_runs(tmp_path)
    found = {v.baseline.method: v for v in verdicts(runs)}
    assert set(found) == {"zero-shot", "few-shot"}
    v = found["zero-shot"]
    assert v.test.accuracy_b == pytest.approx(0.5) and v.reference.name == "cloze"
    assert v.reference.value == pytest.approx(0.6)
    assert "format 0.55 → 1.00" in v.numbers() and "+0.37 [" in v.numbers() and "cloze 0.60" in v.numbers()
    # without a soft-prompt run, few-shot is judged against zero-shot
    other = tmp_path / "other"
    write_run(other, "gemma", "arc", "zero-shot", [i < 8 for i in range(n)])
    write_run(other, "gemma", "arc", "few-shot", [i < 12 for i in range(n)])
    runs, _ = load_runs(other)
    assert [(v.baseline.method, v.treated.method) for v in verdicts(runs)] == [("zero-shot", "few-shot")]


def test_runs_of_other_settings_are_not_judged(tmp_path, capsys):
    """A GSM8K zero-shot run written before the task's revision 2 beside a soft-prompt run of its current one: the
    pair's difference is not the method's alone, so no verdict reads it, and `softeval compare` says why."""
    from softeval.run.config import RunConfig

    soft = RunConfig(model="m", task="gsm8k").options("soft-prompt", here=False)
    zero = {k: v for k, v in soft.items() if k != "task_revision"} | {"method": "zero-shot"}
    n = 40
    write_run(tmp_path, "m", "gsm8k", "zero-shot", [False] * n, items=Items(format_ok=[False] * n),
              extras=Extras(config=zero))
    write_run(tmp_path, "m", "gsm8k", "soft-prompt", [i < 20 for i in range(n)], extras=Extras(config=soft))
    runs, _ = load_runs(tmp_path)
    (v,) = verdicts(runs)
    assert v.rule == "other-settings" and v.sentence.startswith("not judged: the soft-prompt and zero-shot runs")
    assert f"task_revision: not recorded -> {soft['task_revision']}" in v.sentence and "+0.50" in v.numbers()
    parser = argparse.ArgumentParser()
    cli_analysis.register(parser.add_subparsers())
    args = parser.parse_args(["compare", str(tmp_path)])
    assert args.handler(args) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "soft-prompt vs zero-shot: the runs differ in more than their method (task_revision: not recorded" in said
    write_run(tmp_path, "m", "gsm8k", "zero-shot", [False] * n, items=Items(format_ok=[False] * n),
              extras=Extras(config={**soft, "method": "zero-shot"}))  # scored again with the soft prompt's settings
    (v,) = verdicts(load_runs(tmp_path)[0])
    assert v.rule == "format-hid-knowledge"


def test_run_prints_the_verdict(toy, tmp_path, monkeypatch, capsys):
    """`softeval run` with two or more methods ends with a verdict line and its numbers."""
    from tiny import run_tiny

    assert run_tiny(monkeypatch, tmp_path, limit=6, steps=2) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "verdict, soft-prompt vs zero-shot:" in out and "verdict, soft-prompt vs few-shot:" in out
    assert "McNemar p" in out and "(n=6)" in out
