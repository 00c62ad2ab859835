"""The engine owns every model call of scoring (softeval.lm.engine.Engine.loglikelihood): the HF engine's
log-likelihoods are lm/loglik's, a run's cloze, permutation and option log-likelihoods are asked of the engine
and of nothing else, and where an engine cannot compute them (vLLM under a soft prompt) the HF engine does, said
in the log and in results.json's ``engine``."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest
import torch
from rich.console import Console
from tiny import tiny_lm
from toymc import mc_config, read_samples

from softeval import tasks
from softeval.lm import backends, generation, loglik
from softeval.lm.backends import Backend, loglikelihood_engine
from softeval.lm.hf_engine import HfEngine
from softeval.lm.softprompt import SoftPrompt
from softeval.run.pipeline import run_job


def _prompts(lm):
    contexts = [lm.tokenizer(t).input_ids for t in ("Q: 1?\nA:", "Q: a longer question here?\nA:", "Q: x\nA:")]
    word = lm.tokenizer(" blue green", add_special_tokens=False).input_ids
    letters = [lm.tokenizer(f" {c}", add_special_tokens=False).input_ids[-1:] for c in "ABCD"]
    return contexts, word, letters


@pytest.mark.parametrize("with_soft", [False, True])
def test_the_hf_engines_loglikelihood_is_lm_logliks(with_soft):
    lm = tiny_lm()
    soft = SoftPrompt.initialise(lm, 3, "vocab", seed=0).weight.detach() if with_soft else None
    contexts, word, letters = _prompts(lm)
    engine = HfEngine(lm, 2)
    assert engine.loglikelihood_refusal(soft) is None  # any soft prompt
    for continuations in ([letters] * 3,  # single tokens: one forward pass per item
                          [[word, word[:1], []], [word[1:]], letters[:2] + [word]]):  # longer, empty, ragged
        ours = engine.loglikelihood(contexts, continuations, soft=soft)
        theirs = loglik.option_logprobs(lm, contexts, continuations, soft=soft, batch_size=2)
        assert ours == theirs  # the same calls: the same numbers, bit for bit
        alone = [[float(loglik.continuation_logprobs(lm, [c + o], [o], soft)[0].sum()) if o else 0.0 for o in conts]
                 for c, conts in zip(contexts, continuations)]
        torch.testing.assert_close(torch.tensor([x for r in ours for x in r]),
                                   torch.tensor([x for r in alone for x in r]), atol=1e-4, rtol=1e-4)
    told = []
    engine.loglikelihood(contexts, [letters] * 3, soft=soft, progress=told.append)
    assert sum(told) == 3


class _Recording:
    """An engine whose generation is the HF engine's and whose log-likelihoods are made up from the token ids
    (no model), recording every request; ``refuses``: it cannot compute them under a soft prompt, as vLLM."""

    def __init__(self, lm, batch_size, refuses=False, has_loglik=True):
        self.inner, self.refuses, self.calls = HfEngine(lm, batch_size), refuses, []
        if not has_loglik:  # an engine written before engines computed log-likelihoods
            self.loglikelihood = self.loglikelihood_refusal = None

    def generate(self, seqs, **kw):
        return self.inner.generate(seqs, **kw)

    def loglikelihood(self, contexts, continuations, *, soft=None, progress=None):
        self.calls.append((len(contexts), soft is not None))
        return [[-float(sum(o) % 97 + len(c) % 5) for o in conts] for c, conts in zip(contexts, continuations)]

    def loglikelihood_refusal(self, soft):
        return "it reads no prompt embeddings" if self.refuses and soft is not None else None

    def record(self):
        return {"backend": "recording"}

    def close(self):
        pass


@pytest.fixture
def recording(monkeypatch):
    """The ``recording`` backend (its engines kept in ``started``) for one test, and lm/loglik's scorer made to
    fail: a log-likelihood the pipeline asked of the model itself would fail the run."""
    started, options = [], {}
    backends.register(Backend("recording", lambda lm, size, args: started.append(
        _Recording(lm, size, **options)) or started[-1], "a test's engine"))

    def no_model(*args, **kw):
        raise AssertionError("a log-likelihood asked of the model, not of the engine")

    hf_scorer = loglik.option_logprobs
    monkeypatch.setattr(loglik, "option_logprobs", no_model)
    yield started, options, hf_scorer, monkeypatch
    backends.unregister("recording")


def _engine_record(out, method):
    return json.loads(next(out.rglob(f"{method}/seed0/results.json")).read_text())["engine"]


def test_every_loglikelihood_of_a_runs_scoring_is_asked_of_the_engine(recording, tmp_path, toymc):
    started, _, _, _ = recording
    out = tmp_path / "out"
    run_job(mc_config(out, methods=("zero-shot", "soft-prompt"), permutations=2, backend="recording"), lm=tiny_lm())
    (engine,) = started
    # per method one chunk: the options (the tiny tokenizer's letters are two tokens each, so not read off the
    # generation's first step), the cloze texts (6 items) and the lettered prompt in 2 other orders (12 prompts)
    assert engine.calls == [(6, False), (6, False), (12, False), (6, True), (6, True), (12, True)]
    for method in ("zero-shot", "soft-prompt"):
        for sample in read_samples(out, method):
            assert len(sample["cloze_scores"]) == 4 and all(s <= 0 and s == int(s) for s in sample["cloze_scores"])
            assert len(sample["permutation_picks"]) == 3
        assert _engine_record(out, method) == {"backend": "recording"}  # it computed them itself


@pytest.mark.parametrize("has_loglik", [True, False])
def test_where_the_engine_cannot_the_hf_engine_computes_them_said_in_the_log_and_the_record(recording, tmp_path,
                                                                                         toymc, has_loglik):
    started, options, hf_scorer, monkeypatch = recording
    options.update(refuses=True, has_loglik=has_loglik)
    asked = []

    def hf_engines(*args, **kw):
        asked.append(len(args[1]))
        return hf_scorer(*args, **kw)

    monkeypatch.setattr(loglik, "option_logprobs", hf_engines)  # the HF engine's way to the model
    out, log = tmp_path / "out", io.StringIO()
    run_job(mc_config(out, methods=("zero-shot", "soft-prompt"), permutations=1, backend="recording"), lm=tiny_lm(),
            console=Console(file=log, width=300))
    why = "it reads no prompt embeddings" if has_loglik else "the recording engine computes no log-likelihoods"
    said = [line for line in log.getvalue().splitlines() if "log-likelihoods on" in line]
    assert len(said) == (1 if has_loglik else 2)  # once per method that the engine cannot score
    assert said[-1] == f"soft-prompt: log-likelihoods on the hf engine: {why}"
    assert _engine_record(out, "soft-prompt") == {"backend": "recording",
                                                  "loglikelihood": {"backend": "hf", "why": why}}
    if has_loglik:
        # zero-shot's options, cloze and one other order on the engine
        assert started[0].calls == [(6, False), (6, False), (6, False)]
        assert _engine_record(out, "zero-shot") == {"backend": "recording"}
        assert asked == [6, 6, 6]  # soft-prompt's, on the HF engine
    else:
        assert asked == [6, 6, 6] * 2


def test_the_hf_engine_computes_them_with_the_runs_batch_size():
    lm = tiny_lm()
    plain = _Recording(lm, 3, refuses=True)
    assert loglikelihood_engine(plain, lm, 3, None) == (plain, None)
    scorer, why = loglikelihood_engine(plain, lm, 5, torch.zeros(2, 32))
    assert isinstance(scorer, HfEngine) and scorer.batch_size == 5 and why == "it reads no prompt embeddings"


def test_options_longer_than_a_token_are_asked_of_the_engine_and_picked_from_its_numbers(recording, tmp_path,
                                                                                          toymc):
    """Options of more than one token (here the tiny tokenizer's letters) are scored by the engine's
    ``loglikelihood``, not a second pass of generation on the model."""
    started, _, _, monkeypatch = recording
    monkeypatch.setattr(generation, "option_logprobs", lambda *a, **k: pytest.fail("a pass on the model"))
    monkeypatch.setitem(tasks.TASKS, "toymc", replace(toymc, cloze=None))
    out = tmp_path / "out"
    run_job(mc_config(out, backend="recording"), lm=tiny_lm())
    assert started[0].calls == [(6, False)]
    lm = tiny_lm()
    for sample in read_samples(out):
        options = [lm.tokenizer(f" {c}", add_special_tokens=False).input_ids for c in "ABCD"]
        assert all(len(o) > 1 for o in options)
        assert sample["letter_loglik_pred"] in "ABCD"
