"""Aggregate metrics and answer counts of a run."""

from softeval.metrics import answer_counts, proportion


def test_answer_counts_show_a_label_prior():
    samples = [{"strict": "B", "gold": g} for g in "ABCDABCD"] + [{"strict": None, "gold": "A"}]
    counts = answer_counts(samples, top=3)
    assert counts["strict"] == [["B", 8], [None, 1]]
    assert counts["gold"] == [["A", 3], ["B", 2], ["C", 2]]


def test_proportion_has_a_wilson_interval_around_the_value():
    p = proportion([True] * 3 + [False] * 7)
    assert p["value"] == 0.3 and p["n"] == 10
    assert 0.10 < p["ci_low"] < 0.3 < p["ci_high"] < 0.61
