"""The permutation (label-prior) check (--permutations): its orders are seeded, distinct and never the
original, a model that follows content is consistent where one that always picks D is not, and a count
below zero or beyond the orders that exist is refused before the model runs."""

from __future__ import annotations

import re

import pytest
from tiny import tiny_lm
from toymc import mc_config, read_samples

from softeval import cli
from softeval.errors import UserError
from softeval.lm import loglik
from softeval.run.pipeline import run_job
from softeval.run.scoring import permutations_for


def _fake_letter_scorer(follow_content: bool, answers: dict[str, str], lm):
    """An option scorer that reads the lettered prompt: it prefers the letter whose option is the
    right colour (content) or always D (a label prior). Cloze prompts (no lettered lines) get 0."""
    real = loglik.option_logprobs

    def scorer(model, contexts, options, **kw):
        out = []
        for ctx, opts in zip(contexts, options):
            text = lm.tokenizer.decode(ctx, skip_special_tokens=True)
            lines = dict(line.split(". ", 1) for line in text.splitlines()
                         if line[:2] in {f"{x}." for x in "ABCD"})
            if not lines:
                out.append([0.0] * len(opts))
                continue
            question = re.search(r"Question: [^\n]*", text).group(0)
            right = answers[question]
            letters = [lm.tokenizer.decode(o).strip() for o in opts]
            out.append([0.0 if (lines[x] == right if follow_content else x == "D") else -5.0
                        for x in letters])
        return out

    return real, scorer


@pytest.mark.parametrize("follow_content", [True, False])
def test_permutation_consistency_exposes_a_letter_prior(tmp_path, toymc, monkeypatch, follow_content):
    lm = tiny_lm()
    answers = {f"Question: {e.fields['question']}": e.fields["answer"] for e in toymc.load().eval}
    _real, scorer = _fake_letter_scorer(follow_content, answers, lm)
    monkeypatch.setattr(loglik, "option_logprobs", scorer)
    (result,) = run_job(mc_config(tmp_path, permutations=3), lm=lm)
    consistency = result["metrics"]["permutation_consistency"]["value"]
    circular = result["metrics"]["circular_accuracy"]["value"]
    if follow_content:
        assert consistency == 1.0 and circular == 1.0
    else:  # "always D": the chosen content moves with the order
        assert consistency <= 0.2 and circular <= 0.2
    for sample in read_samples(tmp_path):
        assert len(sample["permutation_picks"]) == 4  # the original order + 3 permutations


def test_permutations_are_seeded_distinct_and_never_the_original():
    orders = permutations_for(4, 5, "item-1")
    assert orders == permutations_for(4, 5, "item-1") and len(set(orders)) == 5
    assert (0, 1, 2, 3) not in orders
    assert permutations_for(2, 1, "x") == [(1, 0)]  # the one other order there is
    with pytest.raises(ValueError):  # more than exist: Job.prepare refuses --permutations first
        permutations_for(2, 2, "x")


def test_permutations_beyond_the_orders_that_exist_are_refused_before_the_model_runs(tmp_path, toymc):
    """--permutations 30 on 4 options used to run 23 orders while the config recorded 30."""
    n_options = {len(e.options) for e in toymc.load().eval}
    assert n_options == {4}
    with pytest.raises(UserError, match=r"^--permutations 24: item '.+' of toymc has 4 options, so only 23 "
                                        r"other orders; give --permutations 23 or less$"):
        run_job(mc_config(tmp_path, permutations=24), lm=tiny_lm())
    assert not any(tmp_path.iterdir())


def test_permutations_are_a_clear_error_below_zero():
    assert cli.main(["eval", "--model", "tiny", "--task", "mmlu", "--permutations", "-1"]) == 2
