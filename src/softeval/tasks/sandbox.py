"""The Jinja sandbox a task file's templates render in (tasks/custom.py), bounded per rendered row in time and
in size (docs/reference/task-format.md, "Bounds").

Jinja's own sandbox blocks attribute tricks and code, and bounds each ``range`` to 100,000 items, but not what a
template computes: two nested ranges loop 10^10 times, ``'x' * 1000000000`` builds a gigabyte in one step. So here:

- time: each rendering has RENDER_SECONDS; every loop step, call, filter and operator the template runs checks it;
- size: no value a template computes (an operator's result, ``~``, a filter's or a method's result, an output) may
  weigh more than MAX_CHARS (a string: its characters; a list or mapping: what ``str`` of it writes, about), each
  refused *before* it is built where it could be big at once (``*``, ``+``, ``%``, ``join``, ``replace``,
  ``center``, format widths, ...); and all a rendering computes together may not weigh more than MAX_COMPUTED (a
  bound on the memory one row's rendering can hold, however it loops or recurses). Mutating built-in lists and
  mappings is refused (Jinja's ``ImmutableSandboxedEnvironment``), so values only grow through these checks.

Past a bound the rendering stops with ``RenderBound``, one line naming the bound; the caller names the row.
"""

from __future__ import annotations

import contextvars
import re
import string
import time
from functools import update_wrapper
from typing import Any

from jinja2 import Environment, StrictUndefined, nodes
from jinja2.nodes import EvalContext
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range
from jinja2.visitor import NodeTransformer

RENDER_SECONDS = 2.0  # one template on one row; a real prompt renders in well under a millisecond
MAX_CHARS = 2_000_000  # one value or output: about 500,000 tokens, more than any model's context here
MAX_COMPUTED = 16 * MAX_CHARS  # everything one rendering computes, together
MAX_INT_BITS = 100_000  # an integer a template computes (about 30,000 digits)
BOUNDS_DOC = 'docs/reference/task-format.md, "Bounds"'


class RenderBound(Exception):
    """A rendering went past a bound (time or size); the message names it."""


class _Budget:
    """One rendering's clock and the weight of what it has computed."""

    def __init__(self) -> None:
        self.deadline = time.monotonic() + RENDER_SECONDS
        self.computed = 0
        self.steps = 0


_CURRENT: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("softeval_render_budget", default=None)


def _tick() -> None:
    budget = _CURRENT.get()
    if budget is not None:
        budget.steps += 1
        if budget.steps & 63 == 0 and time.monotonic() > budget.deadline:
            raise RenderBound(f"it ran past {RENDER_SECONDS:g} s, the bound on rendering one row ({BOUNDS_DOC})")


def weight(value: Any, limit: int = MAX_CHARS) -> int:
    """About what ``str(value)`` writes, in characters (a string's length; a container's items, each counted as
    often as it appears), counted no further than just past ``limit``."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value.bit_length() // 3 + 1
    if not isinstance(value, list | tuple | dict | set | frozenset):
        return 1
    total, todo = 0, [value]
    while todo and total <= limit:
        item = todo.pop()
        if isinstance(item, str):
            total += len(item) + 4
        elif isinstance(item, list | tuple | set | frozenset):
            total += 2 + len(item)
            todo.extend(item)
        elif isinstance(item, dict):
            total += 2 + 2 * len(item)
            todo.extend(item.keys())
            todo.extend(item.values())
        else:
            total += weight(item) + 2
    return total


def _refuse(what: str, size: int, bound: int = MAX_CHARS) -> None:
    if size > bound:
        raise RenderBound(f"{what} would make a value of about {size:,} characters, past the bound of {bound:,} "
                          f"on one value ({BOUNDS_DOC})")


def _counted(value: Any) -> Any:
    """``value``, once its weight is checked and counted against the rendering's MAX_COMPUTED."""
    size = weight(value)
    _refuse("it", size)
    budget = _CURRENT.get()
    if budget is not None:
        budget.computed += size
        if budget.computed > MAX_COMPUTED:
            raise RenderBound(f"it computed more than {MAX_COMPUTED:,} characters of values, the bound on rendering "
                              f"one row ({BOUNDS_DOC})")
    return value


_PRINTF = re.compile(r"%(?:\([^)]*\))?[#0 +\-]*(\*|\d+)?(?:\.(\*|\d+))?[a-zA-Z%]")


def _check_printf(fmt: Any, args: Any) -> None:
    """``fmt % args`` (and the ``format`` filter): its widths, and its fields times its largest argument."""
    if not isinstance(fmt, str):
        return
    specs = _PRINTF.findall(fmt)
    values = list(args.values()) if isinstance(args, dict) else list(args) if isinstance(args, tuple) else [args]
    widths = [int(n) for spec in specs for n in spec if n.isdigit()]
    widths += [v for spec in specs if "*" in spec for v in values if isinstance(v, int)]
    largest = max([weight(v) for v in values] + widths + [0])
    _refuse("a % format", len(fmt) + len(specs) * largest)


def _check_format(fmt: str, args: tuple, kwargs: dict) -> None:
    """``fmt.format(...)``: its widths, and its fields times its largest argument."""
    try:
        fields = [(name, spec or "") for _, name, spec, _ in string.Formatter().parse(fmt) if name is not None]
    except ValueError:
        return  # str.format raises its own error
    widths = [int(n) for _, spec in fields for n in re.findall(r"\d+", spec)]
    if any("{" in spec for _, spec in fields):  # a width given as an argument
        widths += [v for v in (*args, *kwargs.values()) if isinstance(v, int)]
    largest = max([weight(v) for v in (*args, *kwargs.values())] + widths + [0])
    _refuse("a format", len(fmt) + len(fields) * largest)


def _check_join(separator: str, items: list) -> None:
    _refuse("a join", sum(weight(i) for i in items) + len(str(separator)) * len(items))


def _check_replace(text: str, old: Any, new: Any, count: Any = -1) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str) and len(new) > len(old):
        hits = text.count(old) if old else len(text) + 1
        if isinstance(count, int) and count >= 0:
            hits = min(hits, count)
        _refuse("a replace", len(text) + hits * (len(new) - len(old)))


def _check_width(what: str, text: Any, width: Any, per_line: bool = False) -> None:
    """A width (center, ljust, indent, ...): as a number of characters, or a prefix on each line."""
    lines = text.count("\n") + 1 if per_line and isinstance(text, str) else 1
    size = width if isinstance(width, int) else len(width) if isinstance(width, str) else 0
    _refuse(what, weight(text) + lines * size)


_WIDTH_METHODS = {"center", "ljust", "rjust", "zfill"}


def _check_method(method: Any, args: tuple, kwargs: dict) -> None:
    """A str method that can grow its string a lot in one step, checked before it runs."""
    text, name = getattr(method, "__self__", None), getattr(method, "__name__", "")
    if not isinstance(text, str):
        return
    if name in _WIDTH_METHODS and args:
        _check_width(f"str.{name}", text, args[0])
    elif name == "expandtabs":
        size = args[0] if args and isinstance(args[0], int) else kwargs.get("tabsize", 8)
        _refuse("str.expandtabs", len(text) + text.count("\t") * (size if isinstance(size, int) else 8))
    elif name == "replace" and len(args) >= 2:
        _check_replace(text, *args[:3])
    elif name == "join" and args:
        _check_join(text, args[0])  # a list already (BoundedSandbox.call)
    elif name == "translate" and args and isinstance(args[0], dict):
        _refuse("str.translate", len(text) * max([weight(v) for v in args[0].values()] + [1]))
    elif name == "format":
        _check_format(text, args, kwargs)
    elif name == "format_map" and args and isinstance(args[0], dict):
        _check_format(text, (), args[0])


def _guarded_filter(name: str, function):
    """A filter that checks what can grow big at once before it runs, ticks the clock and counts its result."""

    def guarded(*args, **kwargs):
        _tick()
        values = [a for a in args if not _is_context(a)]
        if values:  # a value that writes out bigger than the bound (a list of one string many times): not at all
            _refuse(f"the {name} filter's value", weight(values[0]))
        if name in ("center", "indent") and values:
            width = values[1] if len(values) > 1 else kwargs.get("width", 80 if name == "center" else 4)
            _check_width(f"the {name} filter", values[0], width, per_line=name == "indent")
        elif name in ("batch", "slice") and len(values) > 1 and isinstance(values[1], int):
            _refuse(f"the {name} filter", values[1])
        elif name == "format" and values:
            _check_printf(values[0], tuple(values[1:]) or kwargs)
        elif name == "replace" and len(values) >= 3:
            _check_replace(*values[:4])
        elif name == "wordwrap" and values and isinstance(values[0], str):
            width = values[1] if len(values) > 1 else kwargs.get("width", 79)
            lines = len(values[0]) // max(width if isinstance(width, int) else 79, 1) + values[0].count("\n") + 1
            wrap = kwargs.get("wrapstring") or "\n"
            _refuse("the wordwrap filter", len(values[0]) + lines * len(wrap if isinstance(wrap, str) else "\n"))
        elif name == "join" and values:
            items = list(values[0])
            _check_join(values[1] if len(values) > 1 else kwargs.get("d", ""), items)
            args = tuple(items if a is values[0] else a for a in args)
        return _counted(function(*args, **kwargs))

    return update_wrapper(guarded, function)  # keeps jinja's pass_context / pass_eval_context mark


def _is_context(value: Any) -> bool:
    """What Jinja passes a filter before its value (pass_context, pass_eval_context, pass_environment)."""
    return isinstance(value, Context | EvalContext | Environment)


class _Ticking:
    """A for loop's iterable, ticking the clock at each item (its length, where it has one, as it is)."""

    def __init__(self, iterable: Any) -> None:
        self.iterable = iterable

    def __iter__(self):
        for item in self.iterable:
            _tick()
            yield item

    def __len__(self) -> int:
        return len(self.iterable)


class _Instrument(NodeTransformer):
    """Every for loop's iterable ticks the clock; every ``~`` and every output is checked and counted. Each goes
    through one of the sandbox's own filters (a filter is called directly, without the sandbox's ``call``)."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = _through("softeval_ticking", node.iter)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return _through("softeval_concat", nodes.Tuple(node.nodes, "load", lineno=node.lineno))

    def visit_Output(self, node: nodes.Output) -> nodes.Node:
        self.generic_visit(node)
        node.nodes = [n if isinstance(n, nodes.TemplateData) else _through("softeval_output", n) for n in node.nodes]
        return node


def _through(name: str, node: nodes.Expr) -> nodes.Filter:
    return nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)


def _ticking(iterable: Any) -> _Ticking:
    return _Ticking(iterable)


def _concat(values: tuple) -> str:
    _tick()
    _refuse("a ~", sum(weight(v) for v in values))
    return _counted("".join(str(v) for v in values))


def _output(value: Any) -> Any:
    _tick()
    _refuse("an output", weight(value))
    return value


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with the bounds of this module (its docstring)."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self) -> None:
        super().__init__(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)
        self.filters = {name: _guarded_filter(name, f) for name, f in self.filters.items()}
        self.filters.update(softeval_ticking=_ticking, softeval_concat=_concat, softeval_output=_output)
        self.globals.pop("lipsum", None)  # lorem ipsum, n paragraphs in one call: no prompt needs it

    def _generate(self, source, name, filename, defer_init=False):  # noqa: ANN001 (jinja's hook, as it declares it)
        return super()._generate(_Instrument().visit(source), name, filename, defer_init=defer_init)

    @staticmethod
    def concat(pieces) -> str:  # noqa: ANN001 (jinja joins a macro's, a {% set %} block's or a loop's output with it)
        pieces = list(pieces)
        _refuse("a block's output", sum(len(str(p)) for p in pieces))
        return _counted("".join(pieces))

    def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:  # noqa: ANN001
        _tick()
        ints = isinstance(left, int) and isinstance(right, int)
        if operator == "*" and ints:
            _refuse("a product", left.bit_length() + right.bit_length(), MAX_INT_BITS)
        elif operator == "*":
            times = right if isinstance(right, int) else left if isinstance(left, int) else 1
            _refuse("a *", (weight(left) if isinstance(right, int) else weight(right)) * max(times, 0))
        elif operator == "**" and ints and right > 0 and abs(left) > 1:
            _refuse("a power", right * left.bit_length(), MAX_INT_BITS)
        elif operator == "+" and not ints:
            _refuse("a +", weight(left) + weight(right))
        elif operator == "%":
            _check_printf(left, right)
        return _counted(super().call_binop(context, operator, left, right))

    def call(__self, __context, __obj, *args: Any, **kwargs: Any) -> Any:  # noqa: N805, ANN001 (jinja's signature)
        _tick()
        method = getattr(__obj, "__wrapped__", __obj)
        if getattr(method, "__name__", "") == "join" and isinstance(getattr(method, "__self__", None), str) and args:
            args = (list(args[0]), *args[1:])  # what it joins, counted before it is
        if __obj is not safe_range:
            _check_method(method, args, kwargs)
        return _counted(super().call(__context, __obj, *args, **kwargs))


def render(template, variables: dict) -> str:
    """``template`` (compiled by a ``BoundedSandbox``) rendered with ``variables``, within the bounds: else
    ``RenderBound``. Its output is gathered piece by piece, each checked against MAX_CHARS."""
    token = _CURRENT.set(_Budget())
    try:
        pieces, size = [], 0
        for piece in template.generate(variables):
            size += len(piece)
            _refuse("the template's output", size)
            pieces.append(piece)
        return "".join(pieces)
    finally:
        _CURRENT.reset(token)
