"""Data rows (softeval.tasks.data): any bytes in a local data file are read or refused as a UserError,
a field set to null is named as null, and two rows with one item id are an error naming both."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from userfiles import FAST, WORDS, task_file

from softeval.errors import UserError
from softeval.tasks.custom import load_task_file
from softeval.tasks.data import read_local, require_fields


@FAST
@given(content=st.binary(max_size=300) | WORDS.map(str.encode),
       suffix=st.sampled_from([".jsonl", ".json", ".csv", ".jsonl.gz", ".parquet", ".arrow"]))
def test_property_data_file_reader(tmp_path, content, suffix):
    path = tmp_path / f"data{suffix}"
    path.write_bytes(content)
    try:
        rows = read_local(path)
    except UserError:
        return
    assert isinstance(rows, list)


def test_a_null_field_is_named_as_null():
    with pytest.raises(UserError,
                       match=r"^rows\.jsonl: row 3 has field\(s\) country set to null: give each a value$"):
        require_fields({"q": "x", "country": None}, ["q", "country"], "rows.jsonl", 3)
    with pytest.raises(UserError, match=r"row 3 lacks field\(s\) country \(has: q\)"):
        require_fields({"q": "x"}, ["q", "country"], "rows.jsonl", 3)


def test_duplicate_item_ids_are_an_error_naming_the_id_and_both_rows(tmp_path):
    rows = [{"id": "same" if i in (1, 3) else f"q{i}", "q": f"q{i}", "a": "x"} for i in range(6)]
    task = load_task_file(task_file(tmp_path, rows))
    with pytest.raises(UserError, match=r"rows\.jsonl: rows 1 and 3 have the same id 'same'"):
        task.load()
    # not a bad row to skip: which of the two is the item?
    with pytest.raises(UserError, match="rows 1 and 3"):
        task.load(skip_bad_rows=True)
    rows[3]["id"] = "q3"
    task_file(tmp_path, rows)
    splits = task.load()
    assert sorted(e.id for e in splits.tune + splits.eval) == ["q0", "q2", "q3", "q4", "q5", "same"]


@pytest.mark.parametrize("name", ["rows\0.jsonl", "\ud800\udc00.jsonl"])  # a NUL; a YAML escape's lone surrogates
def test_a_data_file_name_no_file_can_have_is_not_found(tmp_path, name):
    with pytest.raises(UserError, match="data file not found"):
        read_local(tmp_path / name)
