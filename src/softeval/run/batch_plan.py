"""The tuning steps' batches: which tuning items each step reads (seeded shuffles, epoch after epoch), and the
plan regrouped by length (``--length-group``) so each batch pads less. Pure functions of the seed: a resumed run
reads the same batches."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence


def batches(n_items: int, batch_size: int, steps: int, seed: int) -> list[list[int]]:
    """Item indices of every step: seeded shuffles of the tuning items, epoch after epoch."""
    rng = random.Random(seed)
    out, pool = [], []
    for _ in range(steps):
        batch = []
        while len(batch) < batch_size:
            if not pool:
                pool = list(range(n_items))
                rng.shuffle(pool)
            batch.append(pool.pop())
        out.append(batch)
    return out


def length_grouped(plan: Sequence[Sequence[int]], lengths: Callable[[int], int], window: int,
                   seed: int = 0) -> list[list[int]]:
    """Regroup a seeded batch plan by length, ``window`` consecutive steps at a time.

    The items of each window (the same items, drawn by the same seeded shuffle) are sorted by
    length and cut into batches of the original sizes, so each batch pads less; the batches of a
    window are then put in a seeded order. Deterministic for a given plan, lengths and seed."""
    if window <= 1:
        return [list(b) for b in plan]
    out: list[list[int]] = []
    for start in range(0, len(plan), window):
        chunk = [list(b) for b in plan[start:start + window]]
        items = sorted((i for b in chunk for i in b), key=lambda i: (-lengths(i), i))
        regrouped, at = [], 0
        for b in chunk:
            regrouped.append(items[at:at + len(b)])
            at += len(b)
        random.Random(seed * 1_000_003 + start).shuffle(regrouped)
        out.extend(regrouped)
    return out
