"""Checking a run's options before it runs (softeval.run.validate): a config of the wrong type, given
through the library, is refused by both the check and `run_job`, naming the option as the command
line spells it, before any folder is made."""

from __future__ import annotations

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
])
def test_a_run_config_of_the_wrong_type_is_refused_before_it_runs(tmp_path, toy, field, value, message):
    config = toy_config(tmp_path / "out", **{field: value})
    with pytest.raises(UserError, match=message):
        check_config(config, model_given=True)
    with pytest.raises(UserError, match=message):
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
