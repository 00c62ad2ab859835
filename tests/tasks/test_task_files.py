"""Task files a user writes (softeval.tasks.custom): a good one loads and splits as it says, and any
settings generated into one give a task that renders, extracts and matches, or a UserError."""

from __future__ import annotations

import json

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
