"""Files as a user writes them for the refusal tests: task files with their data, hypothesis settings
and text strategies for generated input, and the one-line error that every refusal must be."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
WORDS = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)

# A task file of a capital-city task and its ten rows (``write_spec``).
GOOD_SPEC = {"data": "rows.jsonl", "prompt": "Country: {{ country }}\nCapital:", "answer_field": "capital",
             "answer_regex": r"^\s*([^\n]+)", "split": {"n_tune": 3, "seed": 1}}
ROWS = [{"country": f"C{i}", "capital": f"K{i}"} for i in range(10)]

# A task file with an id field, the rows given to ``task_file``.
TASK_SPEC = ('data: rows.jsonl\nprompt: "Q: {{ q }}\\nA:"\nanswer_field: a\nanswer_regex: "(\\\\w+)"\n'
             'id_field: id\n')


def write_spec(folder: Path, spec: dict, name: str = "t.yaml") -> Path:
    """``spec`` as a YAML task file in ``folder`` beside ``ROWS`` as rows.jsonl."""
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    path = folder / name
    path.write_text(yaml.safe_dump(spec))
    return path


def task_file(tmp_path: Path, rows: list[dict], extra: str = "") -> Path:
    """``TASK_SPEC`` and the YAML lines ``extra`` as task.yaml in ``tmp_path``, ``rows`` as rows.jsonl."""
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / "task.yaml"
    path.write_text(TASK_SPEC + extra)
    return path


def one_line_error(capsys) -> str:
    """What the command printed on stderr: one line, no traceback."""
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err
