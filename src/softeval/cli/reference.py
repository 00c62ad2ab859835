"""The command-line reference (docs/reference/cli.md), written from the parser itself, whose run options come from
the option table (run/config.py): every command, its usage, and its options by group with their values, defaults
and help. `make cli-reference` writes it; tests/cli/test_reference.py fails when the committed page differs.

    python -m softeval.cli.reference [PATH]          # write PATH (default docs/reference/cli.md)
    python -m softeval.cli.reference --check [PATH]  # exit 1 when PATH is not what would be written
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from softeval.cli.app import build_parser
from softeval.run.config import BY_TARGET

PAGE = Path("docs/reference/cli.md")
WIDTH = 100  # the usage lines' width, whatever the terminal's
HEADER = """# Command-line reference

Generated from the parser and its option table (`src/softeval/run/config.py`) by `make cli-reference`; do not
edit by hand (a test fails when this page and the table differ). `softeval COMMAND --help` prints the same
options. The run options are grouped as `softeval run -h` shows them: model and task, methods, tuning, LoRA,
engine, output, advanced.
"""


def _subcommands(parser: argparse.ArgumentParser) -> tuple[argparse._SubParsersAction, dict[str, str]]:
    """The subparsers action and each command's one-line help, in the order the commands were added."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action, {choice.dest: choice.help for choice in action._choices_actions}


def _cell(text: object) -> str:
    """Text for one cell of a Markdown table: on one line, its pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _value(action: argparse.Action) -> str:
    """What an option takes: its choices, a type, or nothing for a switch."""
    if action.nargs == 0:
        return "switch"
    if action.choices is not None:
        return " \\| ".join(f"`{choice}`" for choice in action.choices)
    name = getattr(action.type, "__name__", None) if action.type is not None else None
    text = {"int": "integer", "float": "number"}.get(name, "text")
    if action.metavar:
        text = f"{text} (`{action.metavar}`)"
    return text + (", repeatable" if isinstance(action, argparse._AppendAction) else "")


def _default(action: argparse.Action) -> str:
    """An option's default as the reference shows it."""
    if action.required:
        return "required"
    if action.default is argparse.SUPPRESS:
        return "the run's default"
    if action.default is BY_TARGET:
        return "by the task (see help)"
    if action.nargs == 0:
        return "on" if action.default else "off"
    if action.default is None or action.default == []:
        return "–"
    return f"`{action.default}`"


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """An action's help with its %(default)s and the like filled in, as --help prints it."""
    if not action.help:
        return ""
    formatter = parser._get_formatter()
    return formatter._expand_help(action)


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    return ", ".join(f"`{flag}`" for flag in action.option_strings)


def _groups(parser: argparse.ArgumentParser) -> list[str]:
    """Each non-empty argument group of a command as a heading, its line and a table of its options."""
    out = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if not isinstance(a, argparse._HelpAction)]
        if not actions:
            continue
        out.append(f"### {group.title}\n")
        if group.description:
            out.append(f"{_sentence(group.description)}\n")
        out.append("| option | takes | default | what it does |\n|---|---|---|---|")
        out.extend(f"| {_flags(a)} | {_value(a)} | {_cell(_default(a))} | {_cell(_help(parser, a))} |" for a in actions)
        out.append("")
    return out


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(prog=parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return formatter.format_help().strip()


def _sentence(text: str) -> str:
    """A help line as a sentence: capitalised, and ending in a full stop unless it ends in its own mark."""
    return text[0].upper() + text[1:] + ("" if text.endswith((".", "?", "!")) else ".")


def _command(name: str, help_line: str, parser: argparse.ArgumentParser) -> list[str]:
    return [f"## softeval {name}\n", f"{_sentence(help_line)}\n",
            f"```\n{_usage(parser)}\n```\n", *_groups(parser)]


def render() -> str:
    """The whole page."""
    parser = build_parser()
    action, helps = _subcommands(parser)
    lines = [HEADER, "## Commands\n", "| command | what it does |\n|---|---|"]
    lines.extend(f"| [`softeval {name}`](#softeval-{name}) | {_cell(text)} |" for name, text in helps.items())
    lines.append("")
    for name, text in helps.items():
        lines.extend(_command(name, text, action.choices[name]))
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(prog="python -m softeval.cli.reference", description=__doc__.split("\n\n")[0])
    args.add_argument("path", nargs="?", default=str(PAGE), help=f"the page (default {PAGE})")
    args.add_argument("--check", action="store_true", help="exit 1 when the page differs from what would be written")
    given = args.parse_args(argv)
    page, path = render(), Path(given.path)
    if given.check:
        if not path.is_file() or path.read_text(encoding="utf-8") != page:
            print(f"{path} differs from the option table and the parser: run `make cli-reference`", file=sys.stderr)
            return 1
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
