"""The command line: argparse and printing only, over the library. ``main`` is the `softeval`
entry point; every user error is one line on stderr with exit code 2. May import every layer."""

from softeval.cli.app import main

__all__ = ["main"]
