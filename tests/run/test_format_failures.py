"""What a run records of its format failures: results.json counts each cause and the outputs that hit
the token limit, and every sample says its cause and whether it hit the limit."""

from __future__ import annotations

from tiny import tiny_lm
from toymc import mc_config, read_samples

from softeval.diagnosis import CAUSES
from softeval.run.pipeline import run_job


def test_runs_count_failure_causes_and_record_truncation_per_sample(tmp_path, toymc):
    (result,) = run_job(mc_config(tmp_path), lm=tiny_lm())
    failures = result["format_failures"]
    assert set(failures["causes"]) == set(CAUSES)
    assert failures["failed"] == sum(failures["causes"].values()) == round(
        result["n"] * (1 - result["metrics"]["format_rate"]["value"]))
    samples = read_samples(tmp_path)
    assert all(isinstance(s["hit_max_new_tokens"], bool) for s in samples)
    assert failures["hit_max_new_tokens"] == sum(s["hit_max_new_tokens"] for s in samples)
    assert all((s["failure"] is None) == s["format_ok"] for s in samples)
