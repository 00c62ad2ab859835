"""A task of another distribution, registered through the entry-point group ``softeval.tasks`` with no change to
softeval (docs/reference/tasks.md, "A task from another package"): `softeval tasks` lists it, ``get_task`` finds it
and a run scores it; an entry point that does not load is one line when it is chosen and breaks nothing else."""

from __future__ import annotations

import json
import sys

import pytest
from distributions import installed
from tiny import tiny_lm

from softeval import tasks
from softeval.cli.app import main
from softeval.errors import UserError
from softeval.run import pipeline, validate
from softeval.tasks import TASKS, get_task

# A lab's private benchmark: a package whose module declares its Task (the word's first letter after '#'), and
# entries that do not load: a package that is not installed, one whose import exits, one naming no Task.
FILES = {
    "labbench/__init__.py": """
        import re

        from softeval.tasks.base import Example, Splits, Task

        WORDS = ["abc", "bad", "cab", "dab", "fed", "gab", "hag", "ace", "bed", "cad", "fad", "had"]


        def load(source="offline", **kw):
            items = [Example(id=f"w/{i}", fields={"word": w}, gold=w[0]) for i, w in enumerate(WORDS)]
            return Splits(items[:4], items[4:], "lab words", "tune", "test")


        def first_letter(output, example):
            found = re.match(r"\\s*#([a-z])", output)
            return found.group(1) if found else None


        TASK = Task(name="lab_words", description="a lab's own benchmark", instruction="Write # and the first letter.",
                    render=lambda ex: f"Word: {ex.fields['word']}\\nAnswer:", target=lambda ex: "#" + ex.gold,
                    strict=first_letter, lenient=first_letter, match=lambda answer, ex: answer == ex.gold, load=load,
                    stop=("\\n",), max_new_tokens=4)
        NOT_A_TASK = "lab_words"
        """,
    "labbench_exits/__init__.py": """
        raise SystemExit("labbench needs its licence server")
        """,
    "labbench-1.0.dist-info/METADATA": """
        Metadata-Version: 2.1
        Name: labbench
        Version: 1.0
        """,
    "labbench-1.0.dist-info/entry_points.txt": """
        [softeval.tasks]
        lab_words = labbench:TASK
        lab_missing = labbench_not_installed:TASK
        lab_exits = labbench_exits:TASK
        lab_string = labbench:NOT_A_TASK
        mmlu = labbench:TASK
        """,
}
MODULES = ("labbench", "labbench_exits")
BROKEN = {
    "lab_missing": "labbench_not_installed:TASK of labbench) does not load (ModuleNotFoundError: No module named "
                   "'labbench_not_installed')",
    "lab_exits": "labbench_exits:TASK of labbench) does not load (SystemExit: labbench needs its licence server)",
    "lab_string": "labbench:NOT_A_TASK of labbench) does not load (TypeError: it names 'lab_words', not a "
                  "softeval.tasks.Task called lab_string)",
}


def said(name: str) -> str:
    return (f"task {name} (softeval.tasks entry point {BROKEN[name]}: fix or reinstall that package, or choose "
            "another task")


@pytest.fixture
def labbench(tmp_path, monkeypatch):
    """The distribution installed (its folder on sys.path) for one test; its modules and entry points forgotten
    after (entry points are read once per process: softeval/registry.py)."""
    with installed(tmp_path / "site", FILES, MODULES, monkeypatch):
        yield


def test_softeval_tasks_lists_another_package_s_tasks_and_says_why_one_does_not_load(labbench, capsys):
    assert list(TASKS)[-4:] == ["lab_words", "lab_missing", "lab_exits", "lab_string"]  # the built-in mmlu stays
    assert "labbench" not in sys.modules  # listing the names imports no task
    assert main(["tasks", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert {"mmlu", "gsm8k", "boolq"} <= set(rows) and rows["mmlu"]["description"] != "a lab's own benchmark"
    assert (rows["lab_words"]["n_tune"], rows["lab_words"]["n_eval"]) == (4, 8)
    assert rows["lab_words"]["description"] == "a lab's own benchmark" and rows["lab_words"]["note"] == ""
    assert {name: rows[name]["note"] for name in BROKEN} == {name: said(name) for name in BROKEN}
    assert main(["tasks"]) == 0  # the table, then each task without sizes and why
    printed = capsys.readouterr().out
    assert "lab_words" in printed and said("lab_exits") in " ".join(printed.split())


def test_get_task_finds_it_and_a_run_scores_it(labbench, monkeypatch, tmp_path):
    task = get_task("lab_words")
    assert task is sys.modules["labbench"].TASK and tasks.builtin_revision("lab_words") == 1
    assert tasks.target_kind("lab_words") == "one-line"
    monkeypatch.setattr(pipeline, "load_model", lambda name, **kw: tiny_lm())
    monkeypatch.setattr(validate, "check_model_name", lambda name: None)  # 'tiny-0': no preset, folder or id
    out = tmp_path / "out"
    assert main(["run", "--model", "tiny-0", "--task", "lab_words", "--method", "zero-shot", "--out", str(out),
                 "--eval-batch-size", "8"]) == 0
    samples = (out / "tiny-0" / "lab_words" / "zero-shot" / "seed0" / "samples.jsonl").read_text().splitlines()
    assert len(samples) == 8


def test_a_task_that_does_not_load_is_one_line_when_chosen_and_breaks_nothing_else(labbench, capsys, tmp_path):
    for name in BROKEN:
        with pytest.raises(UserError) as err:
            get_task(name)
        assert str(err.value) == said(name)
    out = tmp_path / "out"
    assert main(["run", "--model", "tiny-0", "--task", "lab_exits", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {said('lab_exits')}"
    assert not out.exists()
    assert get_task("lab_words").name == "lab_words" and get_task("mmlu").name == "mmlu"


def test_without_the_distribution_its_tasks_are_gone():
    assert "lab_words" not in TASKS and list(TASKS) == list(tasks.REGISTRY.built_in_names())
    with pytest.raises(UserError, match="^unknown task 'lab_words': choose one of mmlu, gsm8k, "):
        get_task("lab_words")
