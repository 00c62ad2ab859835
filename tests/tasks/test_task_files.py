"""Task files a user writes (softeval.tasks.custom): a good one loads and splits as it says, and any
settings generated into one give a task that renders, extracts and matches, or a UserError."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from userfiles import FAST, GOOD_SPEC, WORDS, write_spec

from softeval.errors import UserError
from softeval.tasks.custom import load_task_file


def test_good_task_file_loads(tmp_path):
    task = load_task_file(write_spec(tmp_path, GOOD_SPEC))
    splits = task.load()
    assert len(splits.tune) == 3 and len(splits.eval) == 7


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | WORDS,
                           lambda inner: (st.lists(inner, max_size=3)
                                          | st.dictionaries(WORDS, inner, max_size=3)),
                           max_leaves=8)


@FAST
@given(changes=st.dictionaries(st.sampled_from(sorted(load_task_file.__globals__["KEYS"]) + ["other"]),
                               JSON_VALUES, max_size=3))
def test_property_task_file_loader(tmp_path, changes):
    path = write_spec(tmp_path, {**GOOD_SPEC, **changes}, name="p.json")
    path.write_text(json.dumps({**GOOD_SPEC, **changes}))
    try:
        task = load_task_file(path)
        splits = task.load()
        for example in splits.eval[:2]:
            output = task.target(example)
            task.match(task.strict(task.render(example) + output, example), example)
            task.match(task.lenient(output, example), example)
    except UserError:
        pass


def test_a_target_that_fails_its_own_answer_regex_is_refused_naming_the_first_row(tmp_path):
    """docs/reference/task-format.md says the target must pass answer_regex; a task file whose target cannot was
    accepted, and a soft prompt would have been tuned toward text that never counts as formatted."""
    spec = {**GOOD_SPEC, "answer_regex": r"^ The capital is (\w+)\.$"}
    with pytest.raises(UserError) as refused:
        load_task_file(write_spec(tmp_path, spec)).load()
    assert str(refused.value) == (f"{tmp_path / 'rows.jsonl'}: row 0: the target ' K0' does not pass answer_regex "
                                  "'^ The capital is (\\\\w+)\\\\.$', so a soft prompt tuned toward it could never "
                                  "count as formatted: change target or answer_regex")
    task = load_task_file(write_spec(tmp_path, {**spec, "target": " The capital is {{ gold }}."}))
    example = task.load().eval[0]
    assert task.strict(task.target(example), example) == example.gold
    mc = {"data": "rows.jsonl", "prompt": "{{ country }}", "answer_field": "capital",
          "options_field": ["capital", "country"], "target": " Answer: {{ gold }}"}
    with pytest.raises(UserError, match="does not pass the strict letter format"):  # multiple choice, no regex
        load_task_file(write_spec(tmp_path, mc)).load()
