"""A method of another distribution, as a user would add one (docs/reference/architecture.md, "Adding a method"):
zero-shot with a fixed line before each question, in a package whose spec is registered through the entry-point group
``softeval.methods``. ``install(root)`` writes the distribution into ``root``; a folder on ``sys.path`` (or on the
Ray workers' PYTHONPATH: conftest's ray_cluster) installs it."""

from __future__ import annotations

import textwrap
from pathlib import Path

NAME = "prefixed"
PREFIX = "Read the word carefully.\n"
FILES = {
    "softeval_prefixed/__init__.py": f"""
        from softeval.methods import BASELINE, MethodSpec

        SPEC = MethodSpec(name={NAME!r}, label="prefixed", colour="#aa3377", who="the fixed line", role=BASELINE,
                          default=False, frame=lambda question: {PREFIX!r} + question)
        """,
    "softeval_prefixed-1.0.dist-info/METADATA": """
        Metadata-Version: 2.1
        Name: softeval-prefixed
        Version: 1.0
        """,
    "softeval_prefixed-1.0.dist-info/entry_points.txt": f"""
        [softeval.methods]
        {NAME} = softeval_prefixed:SPEC
        broken = softeval_not_installed:SPEC
        zero-shot = softeval_prefixed:SPEC
        """,
}


def install(root: Path) -> Path:
    """The distribution's files written into ``root`` (the folder to put on a path)."""
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text).lstrip())
    return root
