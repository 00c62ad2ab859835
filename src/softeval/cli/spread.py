"""The spread of each method across prompt variants as `softeval run --prompt-variants` and `softeval compare`
print it (analysis/spread.py computes it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from softeval.analysis.spread import Spread, SpreadTest


def print_spread(console: Console, found: list[Spread], tests: list[SpreadTest]) -> None:
    """The spread of each method across prompt variants (analysis/spread.py), and what its tests show."""
    if not found:
        return
    variants = ", ".join(map(str, sorted({v for s in found for v in s.variants})))
    table = Table(title=escape(f"across prompt variants {variants}: mean [min, max] (std)"))
    for column in ("model", "task", "method", "seed", "accuracy", "format", "accuracy by variant"):
        table.add_column(column, no_wrap=column not in ("model", "accuracy by variant"))
    for s in found:
        cells = [f"{m.mean:.3f} [{m.low:.2f}, {m.high:.2f}]" + (f" ({m.std:.3f})" if m.std is not None else "")
                 for m in (s.accuracy, s.format_rate)]
        each = " ".join(f"{v}: {a:.2f}" for v, a in zip(s.variants, s.accuracy.values))
        table.add_row(s.model, s.task, s.method, str(s.seed), *cells, each)
    console.print(table)
    seeds = len({t.seed for t in tests}) > 1
    for test in tests:  # each names its model and task: a root of many rows prints many tests
        which = f"{test.model} on {test.task}" + (f", seed {test.seed}" if seeds else "")
        line = Text(f"spread, {which}, {test.method} vs {test.baseline}: ", style="bold")
        line.append(test.sentence + ".")
        console.print(line)
