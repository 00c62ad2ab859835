"""The command line starts without the heavy libraries (issue 62, "A CLI that starts at once"): `import softeval`,
`import softeval.cli`, building the parser, `softeval --help`, every `softeval <cmd> --help` and the listing
commands leave torch, transformers and Ray (and scipy, matplotlib) out of ``sys.modules``; each is checked in
a fresh interpreter, since this test process has imported them already. An import check, not a timed test
(benchmarks/bench_cli_start.py times the start)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys

import pytest

import softeval

HEAVY = ("torch", "transformers", "ray", "scipy", "matplotlib")
LIGHT_TOO = ("pydantic", "jinja2", "numpy")  # not needed to build the parser either


def _loaded_after(code: str) -> list[str]:
    """The heavy modules in ``sys.modules`` after ``code`` runs in a fresh interpreter (SystemExit caught:
    argparse's --help exits)."""
    probe = (f"import sys\ntry:\n    exec({code!r})\nexcept SystemExit:\n    pass\n"
             f"print('\\n' + __import__('json').dumps([m for m in {HEAVY + LIGHT_TOO!r} if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("code", [
    "import softeval",
    "import softeval.cli",
    "from softeval.cli.app import build_parser; build_parser()",
    "import softeval; softeval.__version__; softeval.UserError; softeval.PRESETS",
])
def test_importing_softeval_and_building_the_parser_load_no_heavy_library(code):
    assert _loaded_after(code) == []


def _commands() -> list[str]:
    from softeval.cli.app import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return list(sub.choices)


@pytest.mark.parametrize("argv", [[], *[[command] for command in _commands()]])
def test_help_of_softeval_and_of_every_command_loads_no_heavy_library(argv):
    code = f"from softeval.cli import main; main({[*argv, '--help']!r})"
    assert _loaded_after(code) == []


@pytest.mark.parametrize("argv", [["runs", "{out}"], ["runs", "{out}", "--json"], ["compare", "{out}"],
                                  ["report", "{out}", "-o", "{out}/report.html"], ["models"], ["models", "--json"],
                                  ["tasks", "--json"]])
def test_the_reading_and_listing_commands_load_no_torch_transformers_or_ray(argv, tmp_path):
    argv = [a.format(out=tmp_path) for a in argv]
    code = f"from softeval.cli import main; main({argv!r})"
    assert [m for m in _loaded_after(code) if m in ("torch", "transformers", "ray")] == []


def test_every_public_name_is_its_module_s_and_listed():
    """``softeval.NAME`` is ``getattr(module, NAME)`` for each entry of the lazy map; the names of
    softeval.results are checked once that module exists."""
    assert sorted(softeval.__all__) == sorted([*softeval.EXPORTS, "__version__"])
    for name, module in softeval.EXPORTS.items():
        if importlib.util.find_spec(module) is None:
            continue  # softeval.results: written in its own change
        assert getattr(softeval, name) is getattr(importlib.import_module(module), name), name
    with pytest.raises(AttributeError):
        softeval.no_such_name  # noqa: B018


def test_softeval_runs_over_finished_runs_loads_none_of_them(tmp_path):
    """`softeval runs` over real run folders needs none of the heavy libraries, nor numpy or jinja2. Building the
    index checks each run's files through their records (store/schema.py, pydantic models); a listing over a
    current index reads no file, so it imports no pydantic either."""
    from runfactory import outcomes, write_run

    for method in ("zero-shot", "few-shot", "soft-prompt"):
        write_run(tmp_path, "m", "mmlu", method, outcomes(20, 0.5))
    code = f"from softeval.cli import main; assert main(['runs', {str(tmp_path)!r}]) == 0"
    assert _loaded_after(code) == ["pydantic"]  # the index built on the way: every run checked
    assert _loaded_after(code) == []  # the index current: nothing read
