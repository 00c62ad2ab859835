"""The report's templates (package data under ``softeval/analysis/templates``) and what they are rendered
with: one jinja2 environment, autoescaping on, so every piece of text that came from a run is escaped
wherever a template puts it. The one shape of the report's tables and metric cells is the ``table`` and
``metric`` macros of ``templates/tables.html.j2``; this module gives them their filters.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape


def wbr(name: Any) -> Markup:
    """A column name, escaped, with a line break allowed after each underscore."""
    return Markup(str(escape(str(name))).replace("_", "_<wbr>"))


def p_value(p: float | None) -> str:
    """McNemar's p as the knowledge tables show it: 2 significant digits below 0.01, else 3 decimals."""
    if p is None:
        return "–"
    return f"{p:.2g}" if p < 0.01 else f"{p:.3f}"


@cache
def environment() -> Environment:
    env = Environment(loader=PackageLoader("softeval.analysis", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(wbr=wbr, p_value=p_value)
    return env


def render(template: str, **context: Any) -> str:
    """``templates/<template>`` rendered with ``context``."""
    return environment().get_template(template).render(**context)
