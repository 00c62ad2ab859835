"""The answer line's share of the tuning loss: weights that put ``share`` on each target's last line,
the weighted loss against the model's own logits, and split passes that keep the whole batch's gradient."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny import plain_target_loss, tiny_lm, tiny_tokenizer

from softeval.lm import tuning_loss

TOK = tiny_tokenizer()
LINE = st.text(alphabet="abc 123#.", min_size=1, max_size=12).filter(lambda s: s.strip())


def _ids(text: str) -> list[int]:
    return TOK(text, add_special_tokens=False).input_ids


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(LINE, min_size=2, max_size=4), min_size=1, max_size=4),
       st.floats(min_value=0.01, max_value=0.99), st.sampled_from(["", "\n", " "]))
def test_the_answer_lines_get_their_share_and_the_weights_sum_to_one(rows, share, tail):
    texts = ["\n".join(lines) + tail for lines in rows]
    targets = [_ids(t) for t in texts]
    weights = tuning_loss.answer_line_weights(TOK, targets, share)
    assert weights is not None and [len(w) for w in weights] == [len(t) for t in targets]
    assert sum(map(sum, weights)) == pytest.approx(1.0)
    on_line = 0.0
    for text, row in zip(texts, weights):
        end = len(text.rstrip())  # one token a character: the last line from its new line to its last text token
        start = text[:end].rindex("\n")
        assert all(w > 0 for w in row)
        on_line += sum(row[start:end])
        assert len(set(row[start:end])) == 1 and len(set(row[:start] + row[end:])) == 1  # a mean over each part
    assert on_line == pytest.approx(share)


def test_no_answer_line_apart_from_the_rest_is_the_plain_mean():
    assert tuning_loss.answer_line_weights(TOK, [_ids("#### 42")], 0.5) is None  # one line: nothing to weigh
    assert tuning_loss.answer_line_weights(TOK, [_ids("a\n#### 4")], None) is None  # no share asked
    assert tuning_loss.answer_line_weights(TOK, [_ids("x\n12"), _ids("7")], 0.5) is not None
    eos = TOK.eos_token_id  # the end token and a trailing new line weigh as the solution: "a number, then stop" is
    weights = tuning_loss.answer_line_weights(TOK, [_ids("ab\n#### 4\n") + [eos]], 0.5)  # not half of "#### N"
    rest, line = 0.5 / 4, 0.5 / 7  # "ab", the last "\n" and the end token; "\n#### 4"
    assert weights[0] == [rest] * 2 + [line] * 7 + [rest] * 2


def _batch(lm):
    texts = [("Q: one\nA:", " step a\nstep b\n#### 4"), ("Q: two two\nA:", " so\n#### 12\n"),
             ("Q: 3\nA:", " 9 then 1\n#### 9")]
    return [_ids(p) for p, _ in texts], [_ids(t) for _, t in texts]


def _soft(lm):
    torch.manual_seed(1)
    return torch.randn(3, lm.model.config.hidden_size) * 0.5


def test_the_weighted_loss_and_its_gradient_equal_the_models_own_logits():
    lm = tiny_lm(seed=3, init_range=0.5)
    prompts, targets = _batch(lm)
    weights = tuning_loss.answer_line_weights(lm.tokenizer, targets, 0.7)
    fast, plain = _soft(lm).requires_grad_(True), _soft(lm).requires_grad_(True)
    loss = tuning_loss.target_loss(lm, prompts, targets, fast, weights)
    loss.backward()
    reference = plain_target_loss(lm, prompts, targets, plain, weights)
    reference.backward()
    assert loss.item() == pytest.approx(reference.item(), rel=1e-5)
    torch.testing.assert_close(fast.grad, plain.grad, atol=1e-6, rtol=1e-4)
    unweighted = plain_target_loss(lm, prompts, targets, _soft(lm)).item()
    assert abs(loss.item() - unweighted) > 1e-4  # the weights change what the loss sees
    ones = [[1.0] * len(t) for t in targets]
    assert tuning_loss.target_loss(lm, prompts, targets, _soft(lm), ones).item() == pytest.approx(unweighted, rel=1e-5)


@pytest.mark.parametrize("max_pass_tokens", [1, 20, 10_000])
def test_split_passes_keep_the_weighted_batchs_gradient(max_pass_tokens):
    lm = tiny_lm(seed=3, init_range=0.5)
    prompts, targets = _batch(lm)
    weights = tuning_loss.answer_line_weights(lm.tokenizer, targets, 0.5)
    whole = _soft(lm).requires_grad_(True)
    loss = tuning_loss.target_loss(lm, prompts, targets, whole, weights)
    loss.backward()
    split = _soft(lm).requires_grad_(True)
    split_loss = tuning_loss.target_loss_backward(lm, prompts, targets, split, max_pass_tokens, weights)
    assert split_loss == pytest.approx(float(loss.detach()), rel=1e-5)
    torch.testing.assert_close(split.grad, whole.grad, atol=1e-6, rtol=1e-4)


def test_the_fallback_path_weighs_the_same(monkeypatch):
    lm = tiny_lm(seed=3, init_range=0.5)
    prompts, targets = _batch(lm)
    weights = tuning_loss.answer_line_weights(lm.tokenizer, targets, 0.6)
    fast = tuning_loss.target_loss(lm, prompts, targets, _soft(lm), weights).item()
    monkeypatch.setattr(tuning_loss, "target_head", lambda lm: None)
    assert tuning_loss.target_loss(lm, prompts, targets, _soft(lm), weights).item() == pytest.approx(fast, rel=1e-5)
