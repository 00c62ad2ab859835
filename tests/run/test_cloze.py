"""The cloze reference of a run (multiple-choice items scored by each option's text after a cloze
prompt): its scores are the summed log-probabilities computed by hand, raw and per character, and the
run records its picks and metrics."""

from __future__ import annotations

import pytest
import torch
from tiny import tiny_lm
from toymc import mc_config, read_samples

from softeval.run.pipeline import run_job
from softeval.tasks.base import LETTERS


def test_cloze_scores_equal_a_hand_computed_sum_raw_and_per_character(tmp_path, toymc):
    lm = tiny_lm(seed=5, init_range=0.5)
    (result,) = run_job(mc_config(tmp_path), lm=lm)
    assert {"cloze_accuracy", "cloze_accuracy_norm", "letter_loglik_accuracy"} <= set(result["metrics"])
    by_id = {e.id: e for e in toymc.load().eval}
    picks_differ = 0
    for sample in read_samples(tmp_path):
        example = by_id[sample["id"]]
        context = lm.tokenizer(toymc.cloze(example)).input_ids  # BOS + the cloze prompt
        expected = []
        for option in example.options:
            cont = lm.tokenizer(" " + option, add_special_tokens=False).input_ids
            with torch.no_grad():
                logp = torch.log_softmax(lm.model(torch.tensor([context + cont])).logits[0].float(), -1)
            expected.append(sum(float(logp[len(context) - 1 + k, tok]) for k, tok in enumerate(cont)))
        assert sample["cloze_scores"] == pytest.approx(expected, abs=1e-4)
        raw = max(range(4), key=lambda j: expected[j])
        norm = max(range(4), key=lambda j: expected[j] / len(example.options[j]))
        assert sample["cloze_pred"] == LETTERS[raw]
        assert sample["cloze_correct"] == (LETTERS[raw] == example.gold)
        assert sample["cloze_norm_pred"] == LETTERS[norm]
        picks_differ += raw != norm
    n = result["n"]
    assert result["metrics"]["cloze_accuracy"]["n"] == n
    assert result["metrics"]["cloze_accuracy"]["ci_low"] is not None
    assert picks_differ >= 0  # the per-character pick may or may not differ on a random model
