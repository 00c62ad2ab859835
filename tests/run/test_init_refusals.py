"""An init the lm layer refuses (softprompt.InitRefused) is worded by the run layer with the options as
the user wrote them: ``--init``/``--tokens`` on the command line, ``init:``/``tokens:`` in a sweep
file, before the model loads (validate.check_init) and after (tune, once the tokenizer is known)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
from tiny import tiny_lm, toy_config

from softeval.errors import UserError
from softeval.lm.softprompt import SoftPrompt, init_from
from softeval.run.config import COMMAND_LINE, SWEEP_FILE
from softeval.run.pipeline import run_job
from softeval.run.tuning_loop import TuneConfig, TunedPart, tune
from softeval.run.validate import check_init

GRAMMAR = 'vocab, random, instruction, text:"some words" or from:PATH (a saved soft prompt)'


@pytest.mark.parametrize("value", ["zeros", "text:", 'text:""', 7])
def test_a_value_outside_the_grammar_is_named_as_written(value):
    with pytest.raises(UserError, match="^" + re.escape(f"--init must be {GRAMMAR}, not {value!r}") + "$"):
        check_init(value)
    with pytest.raises(UserError, match="^" + re.escape(f"'init' must be {GRAMMAR}, not {value!r}") + "$"):
        check_init(value, spelling=SWEEP_FILE)


@pytest.mark.parametrize("value", ["vocab", "random", "text:answer", 'text:"two words"'])
def test_the_grammar_accepts_what_it_always_did(value):
    check_init(value)
    check_init(value, spelling=SWEEP_FILE)


def test_a_warm_start_of_another_size_is_named_as_written(tmp_path):
    SoftPrompt(torch.randn(8, 32)).save(tmp_path / "eight", tiny_lm())
    init = init_from(tmp_path / "eight")
    said = f"--init {init}: that soft prompt has 8 virtual tokens, the run asks for --tokens 4: pass " \
        "--tokens 8"
    with pytest.raises(UserError, match="^" + re.escape(said) + "$"):
        check_init(init, 4)
    said = f"init: {init}: that soft prompt has 8 virtual tokens, the run asks for tokens: 4: pass tokens: 8"
    with pytest.raises(UserError, match="^" + re.escape(said) + "$"):
        check_init(init, 4, spelling=SWEEP_FILE)
    check_init(init, 8)


def _no_tokens(lm):
    tokenizer = lm.tokenizer
    lm.tokenizer = lambda text, **kw: (SimpleNamespace(input_ids=[]) if text == "nothing"
                                       else tokenizer(text, **kw))
    return lm


@pytest.mark.parametrize("name, said", [
    (COMMAND_LINE, '--init text:"nothing": the text has no tokens for this model; give other words'),
    (SWEEP_FILE, 'init: text:"nothing": the text has no tokens for this model; give other words'),
])
def test_tuning_words_an_init_refused_after_the_model_loads(toy, tmp_path, name, said):
    from softeval.tasks import get_task

    splits = get_task("toyformat").load()
    config = TuneConfig(num_tokens=3, init='text:"nothing"', steps=1, curve_items=0)
    with pytest.raises(UserError, match="^" + re.escape(said) + "$"):
        tune(_no_tokens(tiny_lm()), None, splits.tune, [], config, tuned=TunedPart(spelling=name))
    SoftPrompt(torch.randn(8, 32)).save(tmp_path / "eight", tiny_lm())
    sizes = TuneConfig(num_tokens=4, init=init_from(tmp_path / "eight"), steps=1)
    tokens = f"{name.setting('tokens', 4)}: pass {name.setting('tokens', 8)}"
    with pytest.raises(UserError, match=re.escape(tokens)):
        tune(tiny_lm(), None, splits.tune, [], sizes, tuned=TunedPart(spelling=name))


@pytest.mark.parametrize("command, said", [("run", "--init text:"), ("sweep", "init: text:")])
def test_a_job_names_the_init_as_its_command_does(toy, tmp_path, command, said):
    config = toy_config(tmp_path / "out", methods=("soft-prompt",), init='text:"nothing"', steps=1)
    with pytest.raises(UserError, match="^" + re.escape(f'{said}"nothing": the text has no tokens')):
        run_job(config, lm=_no_tokens(tiny_lm()), command=command)
    assert not list((tmp_path / "out").rglob("results.json"))
