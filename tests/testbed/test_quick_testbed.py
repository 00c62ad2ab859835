"""`softeval testbed --quick` end to end (CI runs it): the structure of its output root and testbed.json, the
controls, and a second run that continues instead of redoing. Not which method wins."""

import json
import time

import pytest

from softeval.cli.app import main
from softeval.methods import names
from softeval.store.format import REPORT_FILE, TESTBED_FILE, TESTBED_SWEEP
from softeval.testbed.recipes import CONTROLS, FORMAT_LITTLE, NEVER_SAW, QUICK

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("testbed")
    started = time.perf_counter()
    assert main(["testbed", "--quick", "--out", str(out)]) == 0
    return out, time.perf_counter() - started


def test_the_quick_testbed_writes_its_models_runs_sweep_file_and_summary(quick):
    out, seconds = quick
    data = json.loads((out / TESTBED_FILE).read_text())
    assert data["world_seeds"] == [0] and data["settings"]["quick"]
    assert list(data["methods"]) == list(names())  # every registered method, a new one included
    for cells in data["methods"].values():
        assert set(cells) == {"post", "seen", "cloze"}
        for cell in cells.values():
            assert {"kendall_tau", "spearman_rho", "tau_ci_items", "tau_ci_world_seeds", "tau_per_world"} <= set(cell)
    assert list(data["recipes"]) == [r.name for r in QUICK]
    for recipe in QUICK:
        row = data["recipes"][recipe.name]
        assert row["truth"]["seen_share"] == pytest.approx(recipe.scored_share, abs=0.05)
        assert set(row["scores"]) == {*names(), "post-trained zero-shot"}
        for method in names():
            assert (out / f"w0-{recipe.name}" / "testbed-qa-w0.yaml" / method / "seed0" / "results.json").is_file()
        assert (out / f"w0-{recipe.name}-post" / "testbed-qa-w0.yaml" / "zero-shot" / "seed0").is_dir()
    assert (out / TESTBED_SWEEP.format(seed=0)).is_file()
    assert "Testbed: a world with known answers" in (out / REPORT_FILE).read_text()
    # each base model scored under 2 prompt variants (quick): the rankings' stability across them, per method
    variants = data["prompt_variants"]
    assert variants["k"] == 2 and list(variants["methods"]) == list(names())
    for cell in variants["methods"].values():
        assert cell["stability_pairs"] + cell["pairs_all_tied"] == 1 and len(cell["tau_post_per_variant"]) == 2
        assert cell["stability"] is None or -1 <= cell["stability"] <= 1
    for method, cell in variants["methods"].items():  # variant 0's mean score: the recipes' scores, averaged
        assert len(cell["score_per_variant"]) == 2
        assert cell["score_per_variant"][0] == pytest.approx(
            sum(data["recipes"][r.name]["scores"][method] for r in QUICK) / len(QUICK), abs=2e-3)
    for method in names():
        assert (out / f"w0-{QUICK[0].name}" / "testbed-qa-w0.yaml@v1" / method / "seed0" / "results.json").is_file()
    assert "Rankings across 2 prompt variants" in (out / REPORT_FILE).read_text()
    # the world teaches facts: the rich recipe's cloze is far above the control that never saw them
    assert data["recipes"]["rich"]["truth"]["cloze"] > data["recipes"][NEVER_SAW]["truth"]["cloze"] + 0.3
    assert sum(data["timing"][k] for k in ("pre_training_s", "post_training_s", "comparison_s")) \
        <= data["timing"]["total_s"] + 1


def test_the_controls_are_measured_and_the_never_saw_control_holds(quick):
    out, _ = quick
    data = json.loads((out / TESTBED_FILE).read_text())
    controls = {c["control"]: c for c in data["controls"]}
    assert set(controls) == set(CONTROLS)
    never = controls[NEVER_SAW]
    assert never["held"], never["details"]  # no method finds facts a model never read
    assert len(never["details"]) == len(names()) + 1
    fmt = controls[FORMAT_LITTLE]  # measured and reported either way: whether it holds is a finding
    soft = [r["per_world"]["0"]["scores"]["soft-prompt"] for r in data["recipes"].values()]
    mine = data["recipes"][fmt["recipe"]]["per_world"]["0"]["scores"]["soft-prompt"]
    rank = 1 + sum(s > mine for s in soft) + 0.5 * (sum(s == mine for s in soft) - 1)
    assert fmt["held"] == (rank >= (len(soft) + 1) / 2)
    assert f"rank {rank:g} of {len(soft)}" in fmt["details"][0]


def test_a_second_run_continues_rather_than_redoing(quick):
    out, _ = quick
    weights = sorted((out / "testbed").glob("w0/*/model.safetensors"))
    results = sorted(out.glob("*/*/*/seed0/results.json"))
    before = {p: p.stat().st_mtime_ns for p in weights + results}
    # each base model under the quick prompt variants (2), its partner under the task's own prompt
    assert len(weights) == 2 * len(QUICK) and len(results) == len(QUICK) * (2 * len(names()) + 1)
    assert main(["testbed", "--quick", "--out", str(out)]) == 0
    assert {p: p.stat().st_mtime_ns for p in weights + results} == before
