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


def test_tasks_listing_shows_each_task_s_kind_of_target(tmp_path, capsys):
    assert cli.main(["tasks", "--source", str(tmp_path / "none.jsonl")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any("gsm8k" in line and "worked-solution" in line for line in lines)
    assert any("mmlu" in line and "one-line" in line for line in lines)


def _refused(argv: list[str], capsys) -> str:
    try:
        code = cli.main(argv)
    except SystemExit as exit_:  # argparse
        code = exit_.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    return err


def test_typos_on_the_command_line_name_the_closest_right_word_and_their_command(capsys):
    """`softeval rn` listed the choices without a suggestion, `--modle X` was reported as
    'required: --model', and `--lmit 2` pointed at `softeval --help`; a sweep file's keys already suggested."""
    assert "invalid choice: 'rn'" in (line := _refused(["rn"], capsys)) and "(did you mean 'run'?)" in line
    assert _refused(["run", "--modle", "X", "--task", "mmlu"], capsys) == (
        "error: softeval run: unrecognized option --modle (did you mean --model?) (see softeval run --help)")
    assert _refused(["run", "--model", "x", "--task", "mmlu", "--lmit", "2"], capsys) == (
        "error: softeval run: unrecognized option --lmit (did you mean --limit?) (see softeval run --help)")
    assert "--chat-template: invalid choice: 'of'" in (line := _refused(
        ["eval", "--model", "x", "--task", "mmlu", "--chat-template", "of"], capsys)) and "did you mean 'off'" in line
    assert _refused(["run", "--model", "x", "--task", "mmlu", "stray"], capsys) == (
        "error: softeval run: unrecognized arguments: stray (see softeval run --help)")
    # an abbreviation argparse accepts is no typo; a missing option with nothing mistyped is still named
    assert _refused(["run", "--mod", "x"], capsys) == (
        "error: softeval run: the following arguments are required: --task (see softeval run --help)")
