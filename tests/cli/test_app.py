"""The `softeval` command's parser and listings (softeval.cli.app): every `softeval run` option says
what it does and its default, and `softeval tasks` with an unreadable --source names the problem per
task."""

from __future__ import annotations

import argparse
import json

from softeval import cli
from softeval.cli import app


def test_every_run_option_says_what_it_does_and_its_default():
    """`softeval run -h` is where the README sends users for the options: --eval-batch-size had no
    text at all, and --seed, --curve-every, --curve-items, --method did not say their defaults."""
    run = next(a for a in app.build_parser()._actions
               if isinstance(a, argparse._SubParsersAction)).choices["run"]
    for action in run._actions:
        if action.dest == "help":
            continue
        assert action.help, action.dest
        if action.default not in (None, False) and not action.required:
            assert "default" in action.help, action.dest


def test_tasks_listing_with_a_non_utf8_source_names_the_problem(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\xff\xfe\x80 not utf-8")
    assert cli.main(["tasks", "--json", "--source", str(path)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} >= {"mmlu", "gsm8k"}
    assert all("not UTF-8 text" in r["note"] for r in rows
               if r["name"] != "belebele" or "file" in r["sources"])
