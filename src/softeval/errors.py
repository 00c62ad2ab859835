"""User errors and how they are printed: one plain-text line on stderr, exit code 2."""

from __future__ import annotations

import difflib
import re
import reprlib
import sys
from typing import TextIO

SHOWN_CHARS = 120  # the most an error echoes of a value the user gave (``shown``)
_REPR = reprlib.Repr()  # its limits set one by one: Python 3.11's Repr takes no arguments
_REPR.maxlevel, _REPR.maxstring, _REPR.maxlong, _REPR.maxother = 2, SHOWN_CHARS, SHOWN_CHARS, SHOWN_CHARS


def did_you_mean(given: str, choices, quote: bool = True) -> str:
    """`` (did you mean 'limit'?)`` for the choice closest to a mistyped ``given``, or ''; the one rule for
    typos in a sweep file's keys and on the command line."""
    close = difflib.get_close_matches(str(given), sorted(str(c) for c in choices), n=1)
    if not close:
        return ""
    return f" (did you mean {repr(close[0]) if quote else close[0]}?)"


class UserError(Exception):
    """A mistake in the user's input: printed without a traceback, exit code 2."""


def shown(value: object) -> str:
    """A value the user gave, as an error echoes it: its repr, cut to about ``SHOWN_CHARS`` characters
    (``reprlib``, which stops at the cut: a value of millions of elements, from a YAML alias bomb or a
    huge string, costs no more to show than a short one). Every error that quotes a user's value
    quotes it through here."""
    text = _REPR.repr(value)
    return text if len(text) <= SHOWN_CHARS + 3 else text[:SHOWN_CHARS] + "..."


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
