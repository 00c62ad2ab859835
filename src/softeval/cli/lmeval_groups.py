"""lm-eval groups' scores as tables (`softeval run --task lm-eval:GROUP`, `softeval compare`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from softeval.analysis.lmeval_groups import GroupScore


def print_group_scores(console: Console, rows: list[GroupScore]) -> None:
    """One table: each group (and subgroup) per model, method and seed, lm-eval's aggregate of its
    subtasks' scores with lm-eval's stderr."""
    if not rows:
        return
    table = Table(title="lm-eval groups: lm-eval's aggregation of the subtasks' scores (value ± stderr)")
    for col in ("group", "model", "method", "seed", "subtasks", "items", "score"):
        table.add_column(col, overflow="fold", justify="right" if col in ("seed", "subtasks", "items") else "left")
    for row in rows:
        score = "; ".join(f"{key} {value:.4f}" + (f" ± {err:.4f}" if isinstance(err, float | int) else "")
                          for key, value, err in row.values())
        table.add_row(*(Text(c) for c in (row.alias if row.alias == row.group else f"{row.alias} ({row.group})",
                                          row.model, row.method, str(row.seed), f"{row.tasks}/{row.total}",
                                          str(row.sample_len), score)))
    console.print(table)
    if any(row.missing for row in rows):
        console.print("note: a group with subtasks not run yet is scored over those run (subtasks column)",
                      style="yellow", markup=False, highlight=False)
