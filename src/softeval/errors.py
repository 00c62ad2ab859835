"""User errors and how they are printed: one plain-text line on stderr, exit code 2."""

from __future__ import annotations

import re
import sys
from typing import TextIO


class UserError(Exception):
    """A mistake in the user's input: printed without a traceback, exit code 2."""


def one_line(message: object) -> str:
    """``message`` as one line: every run of whitespace that holds a line break becomes one space.

    Messages quote user input (file names, YAML parser output, option values), which may hold line
    breaks or characters a markup printer would interpret (``[/x]``): they are printed as they are.
    """
    return re.sub(r"\s*[\r\n]+\s*", " ", str(message)).strip()


def print_error(message: object, stream: TextIO | None = None) -> None:
    """``error: <message>`` as one line of plain text (never wrapped, no markup; red only on a terminal)."""
    stream = stream or sys.stderr
    prefix = "\x1b[1;31merror:\x1b[0m" if getattr(stream, "isatty", lambda: False)() else "error:"
    print(f"{prefix} {one_line(message)}", file=stream, flush=True)
