"""Checking a run's options before it runs (softeval.run.validate), at the library: a RunConfig the command
line cannot express (a value of the wrong type, a choice argparse would have refused first, methods as one
string) is refused by both the check and `run_job`, naming the option as the command line spells it, before
any folder is made. The refusals a user reaches through the command line or a sweep file (one line, exit 2,
named as written there) are tested once, in tests/e2e/test_refusals.py."""

from __future__ import annotations

import re

import pytest
from tiny import tiny_lm, toy_config

from softeval.errors import UserError
from softeval.run.pipeline import run_job
from softeval.run.validate import check_config


@pytest.mark.parametrize(("field", "value", "message"), [
    ("early_stop", "no", "--early-stop must be true or false, not str 'no'"),
    ("skip_bad_rows", 1, "--skip-bad-rows must be true or false, not int 1"),
    ("chat_template", True, "--chat-template must be text, not bool True"),
    ("source", False, "--source must be text, not bool False"),
    ("chat_template", "x", "unknown --chat-template 'x': use auto, on or off"),  # argparse's choices refuse it first
])
def test_a_run_config_the_command_line_cannot_give_is_refused_before_it_runs(tmp_path, toy, field, value, message):
    config = toy_config(tmp_path / "out", **{field: value})
    with pytest.raises(UserError, match="^" + re.escape(message)):
        check_config(config, model_given=True)
    with pytest.raises(UserError, match="^" + re.escape(message)):
        run_job(config, lm=tiny_lm())
    assert not (tmp_path / "out").exists()


def test_methods_given_as_one_string_is_refused_naming_the_field(tmp_path, toy):
    """RunConfig(methods="zero-shot") was refused as "unknown method 'z'"."""
    config = toy_config(tmp_path / "out", methods="zero-shot")
    message = "RunConfig's methods is a list or tuple of methods, not str 'zero-shot': e.g. methods=('zero-shot',)"
    with pytest.raises(UserError) as refused:
        run_job(config, lm=tiny_lm())
    assert str(refused.value) == message
    with pytest.raises(UserError, match=r"not set \{'few-shot'\}: e.g. methods=\('zero-shot', 'few-shot', "):
        check_config(toy_config(tmp_path / "out", methods={"few-shot"}), model_given=True)
    assert not (tmp_path / "out").exists()
