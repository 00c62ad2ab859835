"""The layer contract (pyproject.toml, docs/reference/architecture.md) is what `lint-imports` checks in CI: it
holds on the package as it is, and an upward import planted in a copy of it breaks it."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(src: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=src.parent,
                          env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)


@pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed (the test extra has it)")
def test_the_layers_hold_and_an_upward_import_breaks_them(tmp_path):
    assert lint(ROOT / "src").returncode == 0, lint(ROOT / "src").stdout
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "softeval", src / "softeval", ignore=shutil.ignore_patterns("__pycache__"))
    models = src / "softeval" / "lm" / "models.py"
    models.write_text(models.read_text() + "\nfrom softeval.run import pipeline  # planted: lm importing run\n")
    broken = lint(src)
    assert broken.returncode != 0
    assert "softeval.lm is not allowed to import softeval.run" in broken.stdout


@pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed (the test extra has it)")
def test_an_import_cycle_between_two_modules_of_a_package_breaks_the_contract(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "softeval", src / "softeval", ignore=shutil.ignore_patterns("__pycache__"))
    batching = src / "softeval" / "lm" / "batching.py"  # generation imports batching: planted, the way back
    batching.write_text(batching.read_text() + "\nfrom softeval.lm import generation  # planted: a cycle\n")
    broken = lint(src)
    assert broken.returncode != 0
    assert "no import cycles BROKEN" in broken.stdout


def line_counts(files) -> dict[str, int]:
    return {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in files}


# ruff's complexity rules (pyproject.toml: C901, PLR0913, PLR0915) hold each function to one screen; they do not see
# how many functions a module gathers. This ceiling is the backstop for that: a module that grows past it holds
# more than one concern and is split by what it holds. 500, not the 400 it was before those rules: splitting a
# function into named steps adds lines (a def and a docstring each), and modules at 390-399 would otherwise be
# split by size in the middle of being split by purpose.
MODULE_LINES = 500


def test_no_module_of_the_package_is_over_the_ceiling():
    """docs/reference/architecture.md promises it: a module that grows past it is split by what it holds."""
    sizes = line_counts((ROOT / "src" / "softeval").rglob("*.py"))
    assert sizes and not {path: n for path, n in sizes.items() if n > MODULE_LINES}


def test_no_benchmark_script_is_over_the_ceiling():
    """The same rule for the scripts in benchmarks/ (BENCHMARKS.md): a script that grows past it puts a part
    in a module beside it, which it imports (a script's own folder is on its path)."""
    sizes = line_counts((ROOT / "benchmarks").glob("*.py"))
    assert sizes and not {path: n for path, n in sizes.items() if n > MODULE_LINES}
