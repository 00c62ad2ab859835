"""Option log-likelihoods (softeval.lm.loglik): the grouped and block layouts give the scores of one
sequence per option, for options of very different lengths, with a soft prompt in a shared prefix, and
for a model whose attention drops custom masks (the probe then keeps one row per option)."""

from __future__ import annotations

import torch
from tiny import tiny_lm

from softeval.lm import batching, loglik


def test_grouped_option_scoring_equals_one_sequence_per_option():
    lm = tiny_lm(seed=2, init_range=0.5)
    tok = lambda t, s=False: lm.tokenizer(t, add_special_tokens=s).input_ids
    contexts = [tok("Question: what colour?\nAnswer:", True), tok("Q: b\nAnswer:", True),
                tok("Q: longer one\nA:", True)]
    options = [[tok(" red"), tok(" violet"), tok(" a")], [tok(" blue sky"), tok(" no")],
               [tok(" x"), tok(" yz")]]
    grouped = loglik.grouped_option_logprobs(lm, contexts, options, batch_size=3)
    plain = loglik.option_logprobs(lm, contexts, options, batch_size=2, prefix_cache=False)
    torch.testing.assert_close(torch.tensor([x for r in grouped for x in r]),
                               torch.tensor([x for r in plain for x in r]), rtol=1e-5, atol=1e-4)


def test_grouped_option_scoring_with_options_of_very_different_lengths():
    # One batch's option rows split into groups of similar length, each with its own cache rows.
    lm = tiny_lm(seed=3, init_range=0.5)
    tok = lambda t, s=False: lm.tokenizer(t, add_special_tokens=s).input_ids
    contexts = [tok("Question: which?\nAnswer:", True), tok("Q: two\nAnswer:", True)]
    options = [[tok(" a"), tok(" " + "long option text " * 6), tok(" bc")],
               [tok(" " + "medium words " * 3), tok(" d"), tok(" " + "x y " * 12)]]
    assert len(batching.padding_groups([len(o) + 1 for opts in options for o in opts])) > 1
    grouped = loglik.grouped_option_logprobs(lm, contexts, options, batch_size=16)
    plain = loglik.option_logprobs(lm, contexts, options, batch_size=1, prefix_cache=False)
    torch.testing.assert_close(torch.tensor([x for r in grouped for x in r]),
                               torch.tensor([x for r in plain for x in r]), rtol=1e-5, atol=1e-4)


def test_options_side_by_side_equal_one_row_per_option_with_soft_prompt_and_shared_prefix(monkeypatch):
    # The block layout (all options of an item in one row after its cache) against one row per
    # option, each with its own copy of the cache: same scores, with a soft prompt in the shared
    # prefix, left pads in the context batch, and options from one to many tokens.
    lm = tiny_lm(seed=4, init_range=0.5)
    tok = lambda t, s=False: lm.tokenizer(t, add_special_tokens=s).input_ids
    head = tok("Shared instruction block. ", True)
    contexts = [head + tok("Question: which?\nAnswer:"), head + tok("Q: two words here\nAnswer:"),
                head + tok("Q\nA:")]
    options = [[tok(" a"), tok(" " + "long option text " * 5), tok(" bc")],
               [tok(" " + "medium words " * 3), tok(" d")], [tok(" x y"), tok(" z"), tok(" w"), tok(" v")]]
    soft = torch.randn(3, lm.model.config.hidden_size) * 0.3
    assert loglik.block_options_usable(lm)
    block = loglik.grouped_option_logprobs(lm, contexts, options, soft=soft, batch_size=16)
    monkeypatch.setattr(loglik, "BLOCK_OPTIONS", False)
    rows = loglik.grouped_option_logprobs(lm, contexts, options, soft=soft, batch_size=16)
    plain = loglik.option_logprobs(lm, contexts, options, soft=soft, batch_size=1, prefix_cache=False)
    flat = lambda x: torch.tensor([v for r in x for v in r])
    torch.testing.assert_close(flat(block), flat(rows), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(flat(block), flat(plain), rtol=1e-5, atol=1e-4)


def test_a_model_that_ignores_custom_masks_keeps_one_row_per_option():
    # An attention implementation that drops a 4D mask (as some kernels do) fails the probe, and
    # the scores still equal the plain path's.
    lm = tiny_lm(seed=5, init_range=0.5)
    inner = lm.model.forward

    def drops_4d_masks(*args, attention_mask=None, **kw):
        if attention_mask is not None and attention_mask.dim() == 4:
            attention_mask = None
        return inner(*args, attention_mask=attention_mask, **kw)

    lm.model.forward = drops_4d_masks
    assert not loglik.block_options_usable(lm)
    tok = lambda t, s=False: lm.tokenizer(t, add_special_tokens=s).input_ids
    contexts = [tok("Question: a?\nAnswer:", True), tok("Q: bb\nA:", True)]
    options = [[tok(" red"), tok(" green leaf")], [tok(" x"), tok(" yz w")]]
    grouped = loglik.grouped_option_logprobs(lm, contexts, options, batch_size=8)
    plain = loglik.option_logprobs(lm, contexts, options, batch_size=1, prefix_cache=False)
    torch.testing.assert_close(torch.tensor([x for r in grouped for x in r]),
                               torch.tensor([x for r in plain for x in r]), rtol=1e-5, atol=1e-4)
