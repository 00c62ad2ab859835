"""The user error (softeval.errors): printed as one plain unwrapped line, and every value it echoes
cut by ``shown``, in sweep files and task files alike."""

from __future__ import annotations

import io
import time

import pytest
from userfiles import one_line_error, task_file

from softeval import cli
from softeval.errors import SHOWN_CHARS, UserError, print_error, shown
from softeval.tasks.custom import load_task_file


def test_error_printer_is_one_plain_unwrapped_line():
    stream = io.StringIO()
    message = "shape [num_virtual_tokens, 576] " + "word " * 100 + "\nsecond line\n  third"
    print_error(UserError(message), stream)
    out = stream.getvalue()
    assert out.count("\n") == 1 and "[num_virtual_tokens, 576]" in out and out.endswith("second line third\n")


def test_every_echoed_value_is_cut(tmp_path, capsys):
    assert len(shown("x" * 10**6)) <= SHOWN_CHARS + 3 and shown("abc") == "'abc'"
    huge = [list(range(10**5))] * 10**3  # shared rows: as cheap to show as a short list
    started = time.perf_counter()
    assert len(shown(huge)) <= SHOWN_CHARS + 3 and time.perf_counter() - started < 0.1
    path = tmp_path / "sweep.yaml"
    path.write_text(f"out: out\nmodels: [gemma-3-270m]\ntasks: [mmlu]\nlimit: {'9' * 5000}x\n")
    assert cli.main(["sweep", str(path), "--dry-run"]) == 2
    err = one_line_error(capsys)
    assert "'limit' must be a whole number or null, not str '999" in err and len(err) < 300
    path = task_file(tmp_path, [{"id": "1", "q": "a", "a": "x"}], f"matcher: {'m' * 5000}\n")
    with pytest.raises(UserError, match=r"matcher 'mmm+\.\.\.m+' is not one of") as err:
        load_task_file(path)
    assert len(str(err.value)) < 300
