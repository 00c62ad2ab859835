"""The MATH-500 comparison that runs in ``mathnorm``'s helper process: math-verify's parse and verify,
with softeval's size bound between the two and the MATH rules math-verify lacks (see ``mathnorm``).
Imported only there (math-verify and its LaTeX grammar load at the helper's start)."""

from __future__ import annotations

import re

import sympy
from math_verify import parse, verify

MAX_EXPONENT = 100  # larger powers of an expression with a symbol are not expanded: scoring must stay fast
MAX_DIGITS = 10_000  # no number in the expression may grow past this many digits


def _digits(n: int) -> float:
    return max(1.0, abs(n).bit_length() * 0.30103)


def _too_big(expr) -> bool:
    """Would evaluating ``expr`` (parsed, unevaluated) make a number of more than ``MAX_DIGITS`` digits?

    Sizes are upper bounds in decimal digits, computed innermost first without evaluating anything
    big: a sum or product has at most the digits of its terms together; ``b^e`` at most ``|e|``
    times those of ``b`` (an exponent is evaluated only once its own bound is small). An expression
    with a symbol may be raised to at most ``MAX_EXPONENT`` (``(x+1)^{999}`` would be expanded)."""
    if isinstance(expr, sympy.MatrixBase):
        return any(_too_big(entry) for entry in expr)
    size: dict = {}
    for node in sympy.postorder_traversal(expr):
        if node in size:
            continue
        digits = _node_digits(node, size)
        if digits is None or digits > MAX_DIGITS:
            return True
        size[node] = digits
    return False


def _node_digits(node, size: dict) -> float | None:
    """The bound on ``node``'s digits from its arguments' (``size``); None where it is too big to bound."""
    if node.is_Integer:
        return _digits(int(node))
    if node.is_Rational:
        return _digits(int(node.p)) + _digits(int(node.q))
    if node.is_Atom:  # symbols, floats, pi, i
        return 1.0
    if node.is_Pow:
        return _power_digits(node, size)
    if isinstance(node, sympy.factorial):  # n! has at most n * digits(n) digits
        if size[node.args[0]] > 5:
            return None
        n = abs(complex(node.args[0].evalf(15))) if node.args[0].is_number else 1.0
        return max(1.0, n) * size[node.args[0]]
    return sum(size[arg] for arg in node.args) + 1


def _power_digits(node, size: dict) -> float | None:
    """``b^e``: at most ``|e|`` times the digits of ``b``; None where ``e`` is too big to evaluate, or raises
    an expression with a symbol past ``MAX_EXPONENT``."""
    base, exp = size[node.base], size[node.exp]
    if exp > 5:
        return None
    if not node.exp.is_number:  # x^n: nothing to expand or evaluate
        return base + exp + 1
    power = abs(complex(node.exp.evalf(15)))
    if power > MAX_EXPONENT and node.base.free_symbols:
        return None
    return base * max(1.0, power)


def verified(answer: str, gold: str) -> bool:
    """The comparison itself, run in the helper process: both strings parsed by math-verify (its own
    signal timeouts off: the helper's time limit stands in for them), refused when a parsed number
    would grow past ``MAX_DIGITS`` (then only the plain strings are compared), else math-verify's
    ``verify(gold, answer)``."""
    parsed = [parse(_as_math(s), parsing_timeout=None) for s in (gold, answer)]
    if any(_too_big(e) for found in parsed for e in found if isinstance(e, (sympy.Basic, sympy.MatrixBase))):
        return answer.strip() == gold.strip()
    return bool(parsed[1]) and verify(parsed[0], parsed[1], timeout_seconds=None)


def _as_math(s: str) -> str:
    """An extracted answer as one math span for math-verify's parser, after the two MATH rules that
    math-verify lacks (see ``kept_rules``); stray ``$`` dropped."""
    return "$" + re.sub(r"(?<!\\)\$", "", kept_rules(s)) + "$"


def kept_rules(s: str) -> str:
    """Where math-verify is worse than the old normaliser, its rule is kept: a percent sign is dropped
    (MATH's own ``strip_string`` does so: ``-50\\%`` is ``-50``; math-verify reads ``-50/100`` and
    takes it for -50 only when the number is positive and whole), and a thin space between digit
    groups is a thousands separator (``2\\,220`` is 2220; math-verify reads 222)."""
    s = re.sub(r"\\?%", "", s)
    return re.sub(r"(?<=\d)(?:\\[,;:]|\\ )(?=\d{3}(?!\d))", "", s)


# The LaTeX grammar and sympy's lazily imported parts load on the first comparison (seconds on a busy
# machine): done here, inside the helper's start-up time, so they do not count against an item's limit.
verified(r"\left(1, \frac{\pi}{2}\right)", r"(1, \pi/2)")
verified(r"x^2 + 2x + 1", r"(x+1)^2")
