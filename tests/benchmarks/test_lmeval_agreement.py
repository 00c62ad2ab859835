"""Agreement with lm-eval itself on the packaged SmolLM2 (benchmarks/bench_lmeval_agreement.py, small):
gsm8k 0- and 5-shot, arc_easy and one MMLU subject, item by item the same prompt text and token ids,
outputs, filtered answers and per-item metrics as lm-eval's ``simple_evaluate``, and the same aggregates."""

from __future__ import annotations

import pytest
from benchscripts import load_benchmark

pytest.importorskip("lm_eval")

SETTINGS = [("gsm8k", 0, 2), ("gsm8k", 5, 2), ("arc_easy", 0, 8), ("mmlu_abstract_algebra", 5, 8)]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    bench = load_benchmark("bench_lmeval_agreement")
    from softeval.lm.models import load_model

    lm = load_model("smollm2-135m-instruct", device="cpu")
    hflm = bench.hf_model(lm)
    out = tmp_path_factory.mktemp("agreement")
    return [bench.compare(lm, hflm, name, k, n, out) for name, k, n in SETTINGS]


@pytest.mark.slow
@pytest.mark.parametrize("setting", range(len(SETTINGS)))
def test_softeval_scores_lm_eval_tasks_as_lm_eval_does(rows, setting):
    row = rows[setting]
    assert (row["task"], row["shots"], row["items"]) == SETTINGS[setting]
    for key in ("same_prompt_text", "same_prompt_ids", "same_output", "same_filtered", "same_metrics"):
        assert row[key] == row["items"], (key, row)
    assert len(row["aggregates"]) >= 1
    for name, pair in row["aggregates"].items():
        assert pair["softeval"] == pytest.approx(pair["lm_eval"], abs=1e-12), name
