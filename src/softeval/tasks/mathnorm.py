"""MATH answers: find the ``\\boxed{...}`` answer and decide mathematical equivalence.

The match is HF's ``math-verify`` (the checker lighteval and the open-r1 recipes score MATH-500
with): both the extracted answer and the gold are parsed by its ``parse`` (LaTeX through
latex2sympy, plain numbers and ``1/2``-style expressions) and compared by ``verify(gold, answer)``:
numbers to 6 decimals after rounding, expressions symbolically, tuples and intervals element-wise
(brackets must agree), sets and comma lists in any order, ``x = 5`` against ``5``, units in
``\\text{}``, ``^\\circ``, ``\\$``, ``\\dfrac``, ``\\left``/``\\right``, matrices. Where it is worse
than the hand-written normaliser it replaced, that normaliser's rule is kept
(``mathcheck.kept_rules``: the percent sign, thin-space thousands separators); the table of
where the two differ is in docs/research/tasks.md (``git show 198eb83:benchmarks/math_agreement.py``).

softeval's bounds stay around it. A model's output cannot run code: math-verify's LaTeX parser
builds sympy objects without ``eval``, and its plain-expression path admits only digits and
operators. Nor can it stall scoring: every extractor here is linear in the output; answers longer
than ``MAX_ANSWER_CHARS`` are compared as strings, never parsed; after parsing and before anything
is evaluated, the size of every node of the parsed expression is bounded (digits of powers and
factorials estimated innermost first: ``((9^{999})^{999})^{999}`` would have ~10^9 digits and is
refused, as is any node over ``MAX_DIGITS``; such answers are compared as strings); and the whole
comparison (``mathcheck``) runs in a helper process that is killed after ``TIME_LIMIT_S``
(math-verify's own signal timeouts are off there: on a timeout they return a silent "not equal"),
which raises ``Unscorable`` (the item is counted as unscorable, not silently wrong).
"""

from __future__ import annotations

import re

from softeval.bounded import Bounded, TimeLimit
from softeval.tasks.base import Unscorable

MAX_ANSWER_CHARS = 1_000  # longer answers are compared as plain strings (no MATH answer is this long)
TIME_LIMIT_S = 5.0  # hard limit of one comparison (both parses and verify), in its helper process


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces, else None.
    One pass over the text (a stack of open braces), so unbalanced braces cannot make it quadratic."""
    starts = {m.end() - 1 for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)}
    closing: dict[int, int] = {}
    stack: list[int] = []
    for pos, char in enumerate(text):
        if char == "{":
            stack.append(pos)
        elif char == "}" and stack:
            opened = stack.pop()
            if opened in starts:
                closing[opened] = pos
    if closing:
        opened = max(closing)
        return text[opened + 1:closing[opened]].strip()
    found = re.findall(r"\\boxed ([^\s$]+)", text)  # \boxed 5
    return found[-1] if found else None


def equivalent(answer: str | None, gold: str) -> bool:
    """Is ``answer`` mathematically the same as ``gold``? Raises ``Unscorable`` past the time limit."""
    if answer is None or not answer.strip():
        return False
    if len(answer) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return answer.strip() == gold.strip()
    try:
        return bool(_VERIFY(answer, gold, limit=TIME_LIMIT_S))
    except TimeLimit:
        raise Unscorable(f"comparing {answer[:40]!r} with {gold[:40]!r} took over {TIME_LIMIT_S:g} s") from None


_VERIFY = Bounded("softeval.tasks.mathcheck:verified")
