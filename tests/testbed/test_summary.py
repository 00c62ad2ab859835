"""testbed/summary.py's terminal tables: what testbed.json holds, as a person reads it."""
from pathlib import Path

from rich.console import Console

from softeval.testbed.stats import TARGETS
from softeval.testbed.summary import print_summary


def _summary(variants: dict) -> dict:
    cell = {"kendall_tau": 0.5757, "tau_ci_items": [0.5278, 0.6728], "tau_ci_world_seeds": [0.46, 0.7727]}
    return {"world_seeds": [0, 1, 2], "methods": {"soft-prompt": {t: cell for t in TARGETS}},
            "recipes": {"rich": {"truth": {"seen_share": 1.0, "cloze": 0.9}, "scores": {"soft-prompt": 0.4}}},
            "controls": [], "prompt_variants": variants}


def _printed(summary: dict) -> str:
    console = Console(width=200, record=True)
    print_summary(console, summary, Path("testbed.json"))
    return console.export_text()


def test_the_tau_table_keeps_its_bracketed_title_and_intervals():
    text = _printed(_summary({"k": 1, "methods": {}}))
    assert "[interval over items] [interval over world seeds]" in text  # not taken for markup and dropped
    assert "+0.58 [+0.53, +0.67] [+0.46, +0.77]" in text
    assert "prompt variants" not in text  # one variant: no stability table


def test_the_variant_table_names_rankings_that_are_all_ties():
    variants = {"k": 4, "methods": {
        "zero-shot": {"stability": 0.9037, "stability_pairs": 9, "pairs_all_tied": 9,
                      "tau_post_per_variant": [0.3465, None, 0.3571, 0.3535], "tau_post_mean": 0.3524,
                      "tau_post_min": 0.3465, "tau_post_max": 0.3571, "tau_post_std": 0.0054,
                      "score_per_variant": [0.1417, 0.0, 0.0317, 0.0833]},
        "lora": {"stability": None, "stability_pairs": 0, "pairs_all_tied": 18,
                 "tau_post_per_variant": [None] * 4, "tau_post_mean": None, "tau_post_min": None,
                 "tau_post_max": None, "tau_post_std": None}}}
    lines = _printed(_summary(variants)).splitlines()
    assert any("rankings across 4 prompt variants" in line for line in lines)
    assert any("mean [min, max] std" in line for line in lines)
    zero = next(line for line in lines if "zero-shot" in line)
    assert "+0.90" in zero and "9 of 18" in zero and "+0.35, n/a, +0.36, +0.35" in zero
    assert "+0.35 [+0.35, +0.36] 0.01" in zero and "0.14, 0.00, 0.03, 0.08" in zero
    lora = next(line for line in lines if "lora" in line)
    assert "0 of 18" in lora and lora.count("n/a") == 6  # stability, four variants, the spread
    assert lora.rstrip(" │").endswith("│ -")  # a testbed.json written before the mean scores were: none shown
