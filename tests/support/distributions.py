"""A distribution written into a folder and installed for one test: its folder on ``sys.path``, the registries'
entry points read again (they are read once per process: softeval/registry.py), and its modules and entry points
forgotten after."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from softeval.registry import reread_entry_points


@contextmanager
def installed(root: Path, files: Mapping[str, str], modules: Sequence[str], monkeypatch) -> Iterator[Path]:
    """``files`` (path -> text, dedented) written under ``root``, which is on ``sys.path`` for the block."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text).lstrip())
    monkeypatch.syspath_prepend(str(root))
    reread_entry_points()
    try:
        yield root
    finally:
        reread_entry_points()
        for name in modules:
            sys.modules.pop(name, None)
