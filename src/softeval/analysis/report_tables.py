"""The report's tables, one shape for all. Each sits in a box of its own, at most 80% of the window high,
that scrolls when the table is wider or taller than it: the page itself never scrolls sideways, the box's
scroll bar is on screen, and the column headers stay in sight (sticky). Column headers wrap at the
underscores of metric names, each of which would otherwise be one long word that sets its column's width.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from typing import Any

TABLE_CSS = """
.wide{overflow:auto;max-height:80vh;margin:6px 0 12px}
table{border-collapse:collapse;background:#fff;font-size:12.5px}
th,td{border:1px solid #dde2e8;padding:3px 5px;text-align:left;vertical-align:top}
th{background:#eef1f5;font-size:12px;position:sticky;top:0;z-index:1}tr:nth-child(even) td{background:#fafbfc}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
@media print{.wide{overflow:visible;max-height:none}}
"""


def _header(name: str) -> str:
    """A column name, escaped, with a line break allowed after each underscore."""
    return escape(name).replace("_", "_<wbr>")


def table(columns: Iterable[str], rows: Iterable[str]) -> str:
    """A table of the given column names (plain text) and rows (each a finished <tr>...</tr>)."""
    head = "".join(f"<th>{_header(c)}</th>" for c in columns)
    return f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


def metric_cell(metric: dict[str, Any] | None) -> str:
    """A metric's cell: its value to 3 digits and, below it, its 95% interval to 2 (a column of intervals to
    3 digits is what made a table of every metric wider than a 1280-px window)."""
    if not metric or metric.get("value") is None:
        return '<td class="num">–</td>'
    ci = ""
    if metric.get("ci_low") is not None and metric.get("ci_high") is not None:
        ci = f'<br><span class="ci">[{metric["ci_low"]:.2f}, {metric["ci_high"]:.2f}]</span>'
    return f'<td class="num">{metric["value"]:.3f}{ci}</td>'
