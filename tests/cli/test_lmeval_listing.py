"""``softeval tasks --lm-eval [PATTERN]``: lm-eval's tasks as ``--task`` takes them, with an include path's."""

from __future__ import annotations

import json

import pytest
from lmevalyamls import write_tasks

from softeval import cli

pytest.importorskip("lm_eval")


def test_lm_eval_listing_matches_a_word_and_says_where_the_data_comes_from(tmp_path, capsys):
    folder = write_tasks(tmp_path / "yamls")
    assert cli.main(["tasks", "--lm-eval", "toy_", "--include-path", str(folder), "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"lm-eval:toy_add", "lm-eval:toy_mc"}
    assert (rows["lm-eval:toy_add"]["output_type"], rows["lm-eval:toy_add"]["offline"]) == ("generate_until", "local")
    assert cli.main(["tasks", "--lm-eval", "gsm8k", "--json"]) == 0
    gsm8k = {r["name"]: r for r in json.loads(capsys.readouterr().out)}["lm-eval:gsm8k"]
    assert (gsm8k["kind"], gsm8k["dataset"], gsm8k["offline"]) == ("task", "openai/gsm8k/main", "packaged")
