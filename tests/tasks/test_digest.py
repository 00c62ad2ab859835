"""The digests of what --task and --source name (tasks/digest.py): the YAML's bytes and the data files it
reads, or the --source file's bytes; None for what names no file of the user's."""

from __future__ import annotations

import json

import pytest
from userfiles import GOOD_SPEC, ROWS, write_spec

from softeval.errors import UserError
from softeval.tasks.digest import data_file_sha256, task_file_sha256


def test_a_task_file_digest_follows_its_yaml_and_its_data_file(tmp_path):
    path = write_spec(tmp_path, GOOD_SPEC)
    first = task_file_sha256(str(path))
    assert first == task_file_sha256(str(path)) and len(first) == 64
    rows = tmp_path / "rows.jsonl"
    rows.write_text(rows.read_text().replace('"K3"', '"K33"'))  # one edited data row
    edited_row = task_file_sha256(str(path))
    path.write_text(path.read_text().replace("Capital:", "Capital city:"))  # the prompt changed
    assert len({first, edited_row, task_file_sha256(str(path))}) == 3


def test_a_task_file_with_a_tune_file_digests_both(tmp_path):
    path = write_spec(tmp_path, {**GOOD_SPEC, "tune_data": "tune.jsonl", "split": None})
    (tmp_path / "tune.jsonl").write_text(json.dumps(ROWS[0]) + "\n")
    before = task_file_sha256(str(path))
    (tmp_path / "tune.jsonl").write_text(json.dumps(ROWS[1]) + "\n")
    assert task_file_sha256(str(path)) != before


def test_the_same_files_in_two_folders_have_one_digest_and_other_files_another(tmp_path):
    a, b, c = (tmp_path / n for n in "abc")
    for folder in (a, b, c):
        folder.mkdir()
        write_spec(folder, GOOD_SPEC)
    (c / "rows.jsonl").write_text(json.dumps(ROWS[0]) + "\n")
    digests = [task_file_sha256(str(f / "t.yaml")) for f in (a, b, c)]
    assert digests[0] == digests[1] != digests[2]


def test_built_in_names_offline_and_the_hub_have_no_digest_and_a_missing_task_file_is_named(tmp_path):
    assert task_file_sha256("mmlu") is None
    assert [data_file_sha256(s) for s in ("offline", "hub", "hub:eng_Latn")] == [None, None, None]
    with pytest.raises(UserError, match="task file not found"):
        task_file_sha256(str(tmp_path / "gone.yaml"))


def test_a_source_file_digest_is_its_bytes(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(ROWS[0]) + "\n")
    first = data_file_sha256(str(data))
    data.write_text(json.dumps(ROWS[1]) + "\n")
    assert data_file_sha256(str(data)) != first
    assert data_file_sha256(str(tmp_path)) != data_file_sha256(str(data))  # a folder: digested as no file
