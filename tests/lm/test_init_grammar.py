"""The soft-prompt init grammar, read in one place (softprompt.parse_init): what it accepts, what it
refuses, and that the lm layer's refusals carry the facts but name no command-line option."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from softeval.errors import UserError
from softeval.lm.softprompt import (
    NO_TOKENS,
    NOT_AN_INIT,
    OTHER_TOKENS,
    Init,
    InitRefused,
    SoftPrompt,
    check_warm_start,
    init_from,
    init_source,
    parse_init,
)


@pytest.mark.parametrize("value, parsed", [
    ("vocab", Init("vocab")),
    ("random", Init("random")),
    ("instruction", Init("instruction")),
    ("text:answer", Init("text", text="answer")),
    ('text: "two words" ', Init("text", text="two words")),
    ("from:/some/folder", Init("from", source=Path("/some/folder"))),
    ("from: rel/folder ", Init("from", source=Path("rel/folder"))),
    ("from:", Init("from", source=Path("."))),  # as before: the current folder (refused if it holds none)
])
def test_the_grammar_reads_every_init(value, parsed):
    assert parse_init(value) == parsed


@pytest.mark.parametrize("value", ["zeros", "", "text:", 'text:""', "text:   ", "Vocab", " vocab", "from",
                                   "Instruction", "instruction:",
                                   None, 5, ["vocab"]])
def test_anything_else_is_refused_naming_no_option(value):
    with pytest.raises(InitRefused, match="unknown soft-prompt init") as refused:
        parse_init(value)
    assert refused.value.problem == NOT_AN_INIT and refused.value.value == value
    assert isinstance(refused.value, UserError) and "--" not in str(refused.value)


def test_init_source_and_init_from_use_the_grammar():
    assert init_source(init_from("/a/b")) == Path("/a/b")
    assert init_source("text:from:/a/b") is None and init_source("vocab") is None
    assert init_source(None) is None
    assert init_from(Path("x")) == "from:x"


def test_warm_start_size_is_checked_in_one_place():
    check_warm_start("from:x", 4, 4)
    with pytest.raises(InitRefused) as refused:
        check_warm_start("from:x", 8, 4)
    assert (refused.value.problem, refused.value.found, refused.value.asked) == (OTHER_TOKENS, 8, 4)
    assert "8 virtual tokens" in str(refused.value) and "--" not in str(refused.value)


def test_initialise_refuses_as_the_grammar_does(lm, tmp_path):
    with pytest.raises(InitRefused, match="unknown soft-prompt init 'text:'"):
        SoftPrompt.initialise(lm, 3, "text:")
    SoftPrompt(torch.randn(8, 32)).save(tmp_path / "eight", lm)
    with pytest.raises(InitRefused) as refused:
        SoftPrompt.initialise(lm, 4, init_from(tmp_path / "eight"))
    assert (refused.value.problem, refused.value.found, refused.value.asked) == (OTHER_TOKENS, 8, 4)
    assert "--" not in str(refused.value)


def test_a_text_without_tokens_is_refused_once_the_model_is_known(lm):
    tokenizer = lm.tokenizer
    lm.tokenizer = lambda text, **kw: (SimpleNamespace(input_ids=[]) if text == "nothing"
                                       else tokenizer(text, **kw))
    with pytest.raises(InitRefused, match="no tokens for model tiny-0") as refused:
        SoftPrompt.initialise(lm, 3, 'text:"nothing"')
    assert refused.value.problem == NO_TOKENS and refused.value.value == 'text:"nothing"'
    assert "--" not in str(refused.value)


def test_the_instruction_init_is_the_last_tokens_of_the_task_instruction(lm):
    embed = lm.model.get_input_embeddings().weight.detach()
    ids = lm.tokenizer("abcdef", add_special_tokens=False).input_ids
    assert len(ids) > 3
    three = SoftPrompt.initialise(lm, 3, "instruction", instruction="abcdef").weight.detach()
    assert torch.equal(three, embed[ids[-3:]])  # where the answer's form is said
    many = SoftPrompt.initialise(lm, 2 * len(ids), "instruction", instruction="abcdef").weight.detach()
    assert torch.equal(many, embed[ids + ids])
    for empty in ("", "  "):  # a task without an instruction: vocab init, as seeded
        assert torch.equal(SoftPrompt.initialise(lm, 3, "instruction", seed=4, instruction=empty).weight,
                           SoftPrompt.initialise(lm, 3, "vocab", seed=4).weight)
