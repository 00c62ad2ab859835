"""Length batches (softeval.lm.batching): padding groups bound the padding and keep every row."""

from __future__ import annotations

from softeval.lm import batching


def test_padding_groups_bound_the_padding_and_keep_every_row():
    lengths = [1, 50, 2, 48, 3, 1, 25]
    groups = batching.padding_groups(lengths)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        assert len(g) == 1 or len(g) * max(lengths[i] for i in g) <= 1.25 * sum(lengths[i] for i in g)
    assert batching.padding_groups([4, 4, 4]) == [[0, 1, 2]]
