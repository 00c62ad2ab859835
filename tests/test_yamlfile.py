"""Task and sweep files are read within softeval.yamlfile's bounds: an alias bomb, an alias inside its
own anchor and an oversized file are refused in well under a second with one short line, while a few
aliases still work."""

from __future__ import annotations

import time

import pytest
from userfiles import TASK_SPEC, one_line_error, task_file

from softeval import cli
from softeval.errors import UserError
from softeval.tasks.custom import load_task_file
from softeval.yamlfile import MAX_ALIASED, MAX_BYTES


def _bomb(levels: int) -> str:
    """A flow list of ``levels`` nested anchors, each nine aliases of the one before: 9**levels values."""
    parts = ['&x0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    parts += [f"&x{i} [{', '.join([f'*x{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


def test_a_task_file_alias_bomb_is_refused_before_anything_is_built(tmp_path):
    path = task_file(tmp_path, [{"id": "1", "q": "a", "a": "x"}], f"stop: {_bomb(9)}\n")
    assert path.stat().st_size < 2000
    started = time.perf_counter()
    with pytest.raises(UserError) as err:
        load_task_file(path)
    assert time.perf_counter() - started < 1.0  # was 92.5 s and 5.86 GB
    assert f"its aliases repeat more than {MAX_ALIASED} values" in str(err.value)
    assert len(str(err.value)) < 300


def test_a_sweep_file_alias_bomb_is_one_short_line(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(f"out: out\nmodels: [gemma-3-270m]\ntasks: [mmlu]\nlimit: {_bomb(6)}\n")
    started = time.perf_counter()
    assert cli.main(["sweep", str(path), "--dry-run"]) == 2
    assert time.perf_counter() - started < 1.0
    err = one_line_error(capsys)
    assert "aliases repeat more than" in err and len(err) < 300  # was a 39 MB line


def test_an_alias_inside_its_own_anchor_and_an_oversized_file_are_refused(tmp_path):
    path = task_file(tmp_path, [{"id": "1", "q": "a", "a": "x"}], "stop: &loop [a, *loop]\n")
    with pytest.raises(UserError, match=r"the alias \*loop is used inside its own anchor \(line 6\)"):
        load_task_file(path)
    path.write_text(TASK_SPEC + "stop: [&a lol, " + "*a, " * (MAX_BYTES // 4) + "lol]\n")
    started = time.perf_counter()
    too_big = rf"task\.yaml: \d+ bytes is more than the {MAX_BYTES} a settings file"
    with pytest.raises(UserError, match=too_big):
        load_task_file(path)
    assert time.perf_counter() - started < 1.0  # a 50 MB alias file took 182 s


def test_a_few_aliases_still_work(tmp_path):
    path = task_file(tmp_path, [{"id": str(i), "q": "a", "a": "x"} for i in range(3)],
                     "stop: &s [x, y]\ndescription: &d shared\nname: *d\n")
    task = load_task_file(path)
    assert task.stop == ("x", "y") and task.name == "shared"
