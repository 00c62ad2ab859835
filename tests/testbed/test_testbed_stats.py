"""The testbed's statistics and controls on planted per-item scores (no model, no run folder)."""

import pytest
from scipy import stats
from testbedworlds import RECIPES, TRUE, world

from softeval.testbed.recipes import FORMAT_LITTLE, NEVER_SAW
from softeval.testbed.stats import method_correlations
from softeval.testbed.summary import controls


def test_a_method_that_ranks_as_the_partners_gets_tau_one_and_a_reversed_one_minus_one():
    worlds = [world(s, {"zero-shot": TRUE, "soft-prompt": TRUE[::-1]}, TRUE, TRUE) for s in (0, 1, 2)]
    same = method_correlations(worlds, "zero-shot", n_boot=200)
    flipped = method_correlations(worlds, "soft-prompt", n_boot=200)
    for target in ("post", "seen", "cloze"):
        assert same[target]["kendall_tau"] > 0.6 and flipped[target]["kendall_tau"] < -0.6
        lo, hi = same[target]["tau_ci_items"]
        assert lo <= same[target]["kendall_tau"] <= hi
        assert same[target]["tau_ci_world_seeds"] is not None
    assert len(same["post"]["tau_per_world"]) == 3


def test_tau_is_scipys_on_the_items_as_scored():
    w = world(0, {"zero-shot": [0.8, 0.3, 0.5, 0.1, 0.2]}, TRUE, TRUE)
    got = method_correlations([w], "zero-shot", n_boot=50)
    x = [s.score() for s in w.base["zero-shot"]]
    y = [s.score() for s in w.post]
    assert got["post"]["kendall_tau"] == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-4)
    assert got["post"]["spearman_rho"] == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-4)
    assert got["post"]["tau_ci_world_seeds"] is None  # one world: no interval over world seeds


def test_tied_scores_give_no_tau_rather_than_a_number():
    w = world(0, {"zero-shot": [0.0] * 5}, TRUE, TRUE)
    assert method_correlations([w], "zero-shot", n_boot=50)["post"]["kendall_tau"] is None


def test_the_never_saw_control_fails_loudly_above_chance_and_holds_at_chance():
    at_chance = world(0, {"zero-shot": [0.9, 0.7, 0.5, 0.2, 0.0], "soft-prompt": [0.9, 0.7, 0.5, 0.2, 0.02]},
                      TRUE, TRUE)
    above = world(0, {"zero-shot": TRUE, "soft-prompt": [0.9, 0.7, 0.5, 0.2, 0.6]}, TRUE, TRUE)
    never = {c["control"]: c for c in controls([at_chance], RECIPES, {0: 0.05})}[NEVER_SAW]
    assert never["held"]
    never = {c["control"]: c for c in controls([above], RECIPES, {0: 0.05})}[NEVER_SAW]
    assert not never["held"] and any("ABOVE CHANCE" in d for d in never["details"])


def test_the_format_control_fails_when_the_soft_prompt_ranks_it_high():
    low = world(0, {"soft-prompt": [0.9, 0.7, 0.5, 0.2, 0.0]}, TRUE, TRUE)
    high = world(0, {"soft-prompt": [0.9, 0.3, 0.2, 0.8, 0.0]}, TRUE, TRUE)
    assert {c["control"]: c for c in controls([low], RECIPES, {0: 0.05})}[FORMAT_LITTLE]["held"]
    failed = {c["control"]: c for c in controls([high], RECIPES, {0: 0.05})}[FORMAT_LITTLE]
    assert not failed["held"] and "ranked high" in failed["details"][0]


def test_stability_across_prompt_variants_by_hand():
    """Three variants of one world: the soft prompt ranks the models alike in each, zero-shot reverses its ranking in
    the third. Stability is the mean tau over the three pairs of variants; tau against the partners per variant."""
    from softeval.testbed.stats import variant_stability

    shuffled = [0.1, 0.3, 0.5, 0.7, 0.9]  # TRUE reversed: tau -1 against TRUE
    per_variant = [[world(0, {"soft-prompt": TRUE, "zero-shot": TRUE}, TRUE, TRUE)],
                   [world(0, {"soft-prompt": [v * 0.9 for v in TRUE], "zero-shot": TRUE}, TRUE, TRUE)],
                   [world(0, {"soft-prompt": TRUE, "zero-shot": shuffled}, TRUE, TRUE)]]
    got = variant_stability(per_variant)
    assert got["k"] == 3
    soft, zero = got["methods"]["soft-prompt"], got["methods"]["zero-shot"]
    assert soft["stability"] == pytest.approx(1.0) and soft["stability_pairs"] == 3
    assert zero["stability"] == pytest.approx((1 - 1 - 1) / 3, abs=1e-4)  # pairs (0,1): 1, (0,2): -1, (1,2): -1
    assert zero["tau_post_per_variant"] == pytest.approx([1.0, 1.0, -1.0])
    assert zero["tau_post_min"] == -1.0 and zero["tau_post_max"] == 1.0
    assert zero["tau_post_std"] == pytest.approx(stats.tstd([1.0, 1.0, -1.0]), abs=1e-4)
    assert zero["pairs_all_tied"] == 0
    for method, got_scores in (("soft-prompt", soft), ("zero-shot", zero)):  # each variant's mean over the models
        each = [[s.score() for s in worlds[0].base[method]] for worlds in per_variant]
        assert got_scores["score_per_variant"] == pytest.approx([sum(x) / len(x) for x in each], abs=1e-4)
    # a variant under which every model scores the same has no ranking: its pairs are left out, and counted
    flat = per_variant + [[world(0, {"soft-prompt": TRUE, "zero-shot": [0.0] * len(TRUE)}, TRUE, TRUE)]]
    zero = variant_stability(flat)["methods"]["zero-shot"]
    assert zero["stability_pairs"] == 3 and zero["pairs_all_tied"] == 3
    assert zero["stability"] == pytest.approx((1 - 1 - 1) / 3, abs=1e-4)
    assert zero["tau_post_per_variant"][3] is None and zero["tau_post_min"] == -1.0
    assert zero["score_per_variant"][3] == 0.0  # no ranking, but a score: the format costs every model all of it
    one = variant_stability(per_variant[:1])["methods"]["zero-shot"]
    assert one["stability"] is None and one["tau_post_std"] is None  # one variant: no stability to speak of
