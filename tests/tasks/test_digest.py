"""The digests of what --task and --source name (tasks/digest.py): the YAML's bytes and the data files it
reads, or the --source file's bytes; None for what names no file of the user's."""

from __future__ import annotations

import functools
import hashlib
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
    assert data_file_sha256(str(data)) == hashlib.sha256(data.read_bytes()).hexdigest()  # as sha256sum says
    assert data_file_sha256(str(tmp_path)) is None  # a folder: no data file (the run refuses it first)


def test_a_same_size_edit_within_one_clock_tick_is_seen_and_an_old_file_is_read_once(tmp_path, monkeypatch):
    import os
    import time

    from softeval.tasks import digest

    data = tmp_path / "d.jsonl"
    data.write_text('{"capital": "K1"}\n')
    first = data_file_sha256(str(data))
    stamp = data.stat().st_mtime_ns
    data.write_text('{"capital": "K2"}\n')  # same size, same inode
    os.utime(data, ns=(stamp, stamp))  # and the same modified time, as within one tick of a coarse clock
    assert data_file_sha256(str(data)) != first
    later = time.time_ns() + 10 * digest.RECENT_NS  # the file was changed long ago: read once per version
    monkeypatch.setattr(digest.time, "time_ns", lambda: later)
    reads = []
    real = digest._file_sha256.__wrapped__
    monkeypatch.setattr(digest, "_file_sha256", functools.lru_cache(
        lambda path, version: reads.append(path) or real(path, version)))
    assert data_file_sha256(str(data)) == data_file_sha256(str(data)) != first and len(reads) == 1
