"""The option groups of `softeval run -h` and the generated command-line reference (docs/reference/cli.md):
each option of the table is shown in its row's group, the groups in the table's order, and the committed page
is what `make cli-reference` writes from the parser."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from softeval.cli import reference
from softeval.cli.app import build_parser
from softeval.run.config import ADVANCED, COMMON, EVAL, GROUPS, METHODS, MODEL, OPTIONS, TUNING

ROOT = Path(__file__).resolve().parents[2]


def _command(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _shown_groups(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Each argument group's title and its options' first flags, in help's order (empty groups left out)."""
    return {g.title: [a.option_strings[0] for a in g._group_actions if a.option_strings]
            for g in parser._action_groups if g._group_actions}


def test_every_row_has_a_known_group_and_the_research_knobs_are_advanced():
    assert all(row.group in GROUPS for row in OPTIONS.values())
    for key in ("length_group", "answer_share", "curve_every", "curve_items", "tune_dtype", "lora_dropout"):
        assert OPTIONS[key].group == ADVANCED, key
    assert OPTIONS["model"].group == OPTIONS["task"].group == MODEL
    assert list(GROUPS)[:2] == [MODEL, METHODS]  # the common groups first


@pytest.mark.parametrize(("command", "wheres"), [("run", (COMMON, TUNING)), ("tune", (COMMON, TUNING)),
                                                 ("eval", (COMMON, EVAL))])
def test_run_tune_and_eval_show_each_table_option_in_its_group_in_the_table_s_order(command, wheres):
    shown = _shown_groups(_command(command))
    assert [t for t in shown if t in GROUPS] == [t for t in GROUPS if t in shown]
    for row in OPTIONS.values():
        if row.where in wheres:
            assert row.flag in shown[row.group], (row.key, row.group)
    if command != "tune":  # tune's method is fixed
        assert shown[METHODS][0] == "--method"
    text = _command(command).format_help()
    assert text.index("model and task:") < text.index("methods:") < text.index("advanced:")


def test_track_groups_the_options_it_passes_on():
    shown = _shown_groups(_command("track"))
    assert "--task" in shown[MODEL] and "--method" in shown[METHODS]
    assert "--answer-share" in shown[ADVANCED]


def test_the_reference_lists_every_command_and_every_table_flag():
    page = reference.render()
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name in sub.choices:
        assert f"## softeval {name}\n" in page
    run = page[page.index("## softeval run\n"):page.index("## softeval tune\n")]
    for row in OPTIONS.values():
        if row.where in (COMMON, TUNING):
            assert f"`{row.flag}`" in run, row.flag
    assert run.index("### model and task") < run.index("### tuning") < run.index("### advanced")


def test_the_committed_cli_reference_is_what_the_generator_writes():
    """Run in a fresh interpreter: a method or backend another test registered in this process is not the page's."""
    done = subprocess.run([sys.executable, "-m", "softeval.cli.reference", "--check", "docs/reference/cli.md"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (f"docs/reference/cli.md differs from the option table and the parser: run "
                                  f"`make cli-reference` and commit the page ({done.stderr.strip()})")
