"""Few-shot draws its shots from the tuning items: one rule (prompting.check_shots), worded as the user
wrote the option, used by the job's checks before any model loads and by ``pick_shots``."""

from __future__ import annotations

import pytest

from softeval.errors import UserError
from softeval.run.config import SWEEP_FILE
from softeval.run.prompting import check_shots, pick_shots
from softeval.tasks.base import Example


def test_no_more_shots_than_tuning_items():
    check_shots(3, 3)
    with pytest.raises(UserError, match=r"^--shots 4 is more than the 3 tuning items of mmlu: use --shots 3 or less$"):
        check_shots(4, 3, "mmlu")
    with pytest.raises(UserError, match=r"^shots: 4 is more than the 3 tuning items of mmlu: use shots: 3 or less$"):
        check_shots(4, 3, "mmlu", SWEEP_FILE)
    pool = [Example(id=str(i), fields={}, gold="A") for i in range(3)]
    with pytest.raises(UserError, match=r"^--shots 4 is more than the 3 tuning items: use --shots 3 or less$"):
        pick_shots(pool, 4, seed=0)
    assert [e.id for e in pick_shots(pool, 2, seed=0)] == [e.id for e in pick_shots(pool, 2, seed=0)]
