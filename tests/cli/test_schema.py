"""`softeval schema task|sweep`: the JSON Schema an editor checks a task file or a sweep file against is the one
declaration softeval reads the file through (tasks/schema.py, sweep/schema.py). It accepts the shipped examples
and refuses what softeval refuses; and every key words its own refusal, so none of pydantic's text reaches a user."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from userfiles import GOOD_SPEC, write_spec

from softeval import cli
from softeval.errors import UserError
from softeval.sweep.schema import ModelSpec, ResourcesSpec, SeriesSpec, SweepFile, TaskSpec, checked
from softeval.tasks.custom import load_task_file, read_spec
from softeval.tasks.schema import TaskFile

ROOT = Path(__file__).parents[2]
TASK_FILES = [ROOT / "examples" / "capitals" / "capitals.yaml", ROOT / "tests" / "fixtures" / "unit_conversions" /
              "task.yaml"]
SWEEP = {"out": "out", "models": ["gemma-3-270m"], "tasks": ["mmlu"]}


def printed(capsys, which: str) -> jsonschema.Draft7Validator:
    """The schema `softeval schema` prints, as editors read it: draft 7 (yaml-language-server's), and as valid in
    the latest draft."""
    assert cli.main(["schema", which]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert jsonschema.validators.validator_for(schema) is jsonschema.Draft7Validator
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def test_the_task_schema_takes_the_shipped_task_files_and_refuses_a_bad_one(capsys, tmp_path):
    validator = printed(capsys, "task")
    for path in TASK_FILES:
        validator.validate(yaml.safe_load(path.read_text()))
        load_task_file(path)  # and softeval reads it
    validator.validate(GOOD_SPEC)
    for change in ({"colour": "red"}, {"stop": 5}, {"prompt": None}, {"max_new_tokens": 0}, {"split": {"size": 2}},
                   {"answer_field": ["capital"]}, {"matcher": "fuzzy"}, {"target_kind": "essay"}, {"data": " "}):
        spec = {k: v for k, v in {**GOOD_SPEC, **change}.items() if v is not None}
        assert not validator.is_valid(spec), change
        with pytest.raises(UserError):
            read_spec(write_spec(tmp_path, spec))
    without = {k: v for k, v in GOOD_SPEC.items() if k != "answer_regex"}  # no strict format
    assert not validator.is_valid(without) and validator.is_valid({**without, "options_field": ["a", "b"]})


def test_the_editor_line_the_docs_show_is_a_comment_softeval_reads_past(tmp_path):
    path = write_spec(tmp_path, GOOD_SPEC)
    path.write_text("# yaml-language-server: $schema=task.schema.json\n" + path.read_text())
    assert read_spec(path) == GOOD_SPEC
    docs = {name: (ROOT / "docs" / "reference" / name).read_text() for name in ("task-format.md", "sweeps.md")}
    assert "softeval schema task > task.schema.json" in docs["task-format.md"]
    assert "softeval schema sweep > sweep.schema.json" in docs["sweeps.md"]
    assert all("# yaml-language-server: $schema=" in text for text in docs.values())


def test_the_sweep_schema_takes_the_shipped_sweep_file_and_refuses_a_bad_one(capsys):
    validator = printed(capsys, "sweep")
    validator.validate(yaml.safe_load((ROOT / "examples" / "sweeps" / "packaged.yaml").read_text()))
    series = {**SWEEP, "models": [{"series": "ckpts/", "warm_steps": 20, "resources": {"gpus": 1}},
                                  {"name": "run-b", "checkpoints": [{"path": "/c/early", "step": 500}, "/c/step1000"]},
                                  {"name": "org/base-1b", "kind": "base", "post_trained": "org/base-1b-instruct",
                                   "resources": {"gpus": 0.5, "cpus": 2, "memory_gb": 8}, "steps": 120}],
              "tasks": ["mmlu", {"name": "gsm8k", "limit": 200, "methods": ["zero-shot"]}], "seeds": [0, 1]}
    validator.validate(series)
    checked(series, "sweep file s.yaml")  # and softeval reads it
    for change in ({"modles": []}, {"steps": "ten"}, {"steps": 0}, {"methods": ["two-shot"]}, {"seeds": [1, 1]},
                   {"models": []}, {"models": [{"name": "m", "resourcs": {}}]}, {"retries": -1}, {"out": 5},
                   {"models": [{"series": "a", "checkpoints": ["b"]}]},
                   {"models": [{"series": "a", "post_trained": "b"}]},
                   {"tasks": [{"name": "mmlu", "chat_template": "maybe"}]}):
        spec = {**SWEEP, **change}
        assert not validator.is_valid(spec), change
        with pytest.raises(UserError):
            checked(spec, "sweep file s.yaml")


@pytest.mark.parametrize("key", sorted(TaskFile.model_fields))
def test_every_task_file_setting_words_its_own_refusal(tmp_path, key):
    for value in (True, 3.5, [], {"x": 1}, "", -1):
        try:
            read_spec(write_spec(tmp_path, {**GOOD_SPEC, key: value}))
        except UserError as err:
            assert str(err).startswith("task file ") and "\n" not in str(err), err
            assert "Input should" not in str(err) and "validation error" not in str(err), err


LEVELS = {SweepFile: lambda key, v: {**SWEEP, key: v},
          ModelSpec: lambda key, v: {**SWEEP, "models": [{"name": "m", key: v}]},
          SeriesSpec: lambda key, v: {**SWEEP, "models": [{"series": "s", key: v}]},
          TaskSpec: lambda key, v: {**SWEEP, "tasks": [{"name": "t", key: v}]},
          ResourcesSpec: lambda key, v: {**SWEEP, "models": [{"name": "m", "resources": {key: v}}]}}


@pytest.mark.parametrize("level, key", [(level, key) for level in LEVELS for key in level.model_fields])
def test_every_sweep_file_key_words_its_own_refusal(level, key):
    for value in (True, 3.5, [], {"x": 1}, "", -1, None, ["x"], [{"x": 1}]):
        try:
            checked(LEVELS[level](key, value), "sweep file s.yaml")
        except UserError as err:
            assert str(err).startswith("sweep file s.yaml") and "\n" not in str(err), err
            assert "Input should" not in str(err) and "validation error" not in str(err), err
