"""MATH answers: find the ``\\boxed{...}`` answer and decide mathematical equivalence.

Two answers match when (1) their normalised strings are equal, or (2) both parse to sympy
expressions whose difference simplifies to 0 (numbers: equal within 1e-6 relative), element-wise
for tuples, intervals and comma lists. Normalisation (after the MATH / Minerva rules) handles:
``\\left``/``\\right``, ``\\dfrac``/``\\tfrac`` -> ``\\frac``, ``\\frac12`` -> ``\\frac{1}{2}``,
``a/b``, spaces and ``\\!``/``\\,``, ``\\text{...}``/``\\mbox{...}`` units (dropped when they follow a
number) and words, ``^\\circ``/degrees, ``\\%``, ``\\$``, thousands commas (``1,234``), trailing ``.0``,
a leading ``x =``, ``0.5`` vs ``\\frac{1}{2}``, ``\\sqrt2`` vs ``\\sqrt{2}``, ``\\pi``, ``\\cdot``/``\\times``,
``^`` powers, implicit products (``2\\sqrt{3}``, ``3\\pi``), and ``i`` as the imaginary unit.
Not handled (compared as normalised strings only): matrices, sets given in a different order,
equations with several sides, inequalities, and base-n subscripts beyond literal equality.
Only a whitelisted alphabet is handed to sympy (no attribute access, no names beyond single
letters, sqrt and pi), so a model's output cannot run code. Nor can it stall scoring: every
extractor here is linear in the output; answers longer than ``MAX_ANSWER_CHARS`` are compared as
strings only; before anything is evaluated, the size of every node of the parsed expression is
bounded (digits of powers estimated innermost first: ``((9^{999})^{999})^{999}`` would have ~10^9
digits and is refused, as is any node over ``MAX_DIGITS``); and the sympy comparison runs in a
helper process that is killed after ``TIME_LIMIT_S``, which raises ``Unscorable`` (the item is
counted as unscorable, not silently wrong).
"""

from __future__ import annotations

import re

import sympy
from sympy.parsing.sympy_parser import (
    convert_xor,
    implicit_multiplication_application,
    parse_expr,
    standard_transformations,
)

from softeval.bounded import Bounded, TimeLimit
from softeval.tasks.base import Unscorable

MAX_EXPONENT = 100  # larger powers of an expression with a symbol are not expanded: scoring must stay fast
MAX_DIGITS = 10_000  # no number in the expression may grow past this many digits
MAX_ANSWER_CHARS = 1_000  # longer answers are compared as plain strings (no MATH answer is this long)
TIME_LIMIT_S = 5.0  # hard limit of one sympy comparison, in its helper process
_GLOBALS = {"__builtins__": {}, **{n: getattr(sympy, n) for n in (
    "Integer", "Float", "Rational", "Symbol", "Add", "Mul", "Pow", "UnevaluatedExpr")}}
_TRANSFORMS = standard_transformations + (implicit_multiplication_application, convert_xor)


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


_UNITS = r"(?:units?|degrees?|cm|centimeters?|meters?|m|km|inches|inch|feet|foot|ft|miles?|mph|hours?|" \
         r"minutes?|seconds?|days?|weeks?|years?|dollars?|cents?|sq|square|cubic|points?|ways?)"


def normalize(answer: str) -> str:
    s = str(answer).strip()
    s = s.replace("\n", " ").replace("\\!", "").replace("\\,", "").replace("\\;", "").replace("\\ ", " ")
    s = re.sub(r"\\(?:left|right)\s*", "", s)
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("°", "")
    s = s.replace("\\%", "").replace("%", "").replace("\\$", "").replace("$", "")
    s = re.sub(r"\\(?:mathrm|textbf|mathbf)\{([^{}]*)\}", r"\1", s)
    s = re.sub(rf"(\d)\s*\\(?:text|mbox)\{{\s*{_UNITS}(?:\^?\d)?\s*\}}", r"\1", s)  # 5\text{ cm}
    s = re.sub(r"\\(?:text|mbox)\{([^{}]*)\}", r"\1", s)
    s = re.sub(rf"(\d)\s+{_UNITS}(?:\^?\d)?\s*$", r"\1", s)  # 5 cm
    s = re.sub(r"^[a-zA-Z]\s*=\s*", "", s)  # x = 5
    s = s.rstrip(".").strip()
    s = re.sub(r"(\d),(\d{3})(?!\d)", r"\1\2", s)  # 1,234
    s = re.sub(r"\\frac\s*(\d)\s*(\d)", r"\\frac{\1}{\2}", s)  # \frac12
    s = re.sub(r"\\frac\s*\{([^{}]*)\}\s*(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\s*(\d)\s*\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\sqrt\s*(\d+|[a-z])", r"\\sqrt{\1}", s)
    s = re.sub(r"(\d+)\.0+(?!\d)", r"\1", s)  # 2.0 -> 2
    s = re.sub(r"(\d+\.\d*?[1-9])0+(?!\d)", r"\1", s)  # 2.50 -> 2.5
    s = s.replace(" ", "")
    if re.fullmatch(r"\.\d+", s):
        s = "0" + s
    return s


def _latex_to_py(s: str) -> str | None:
    """A normalised LaTeX expression as a sympy-parsable string, or None when it is out of scope."""
    for _ in range(8):  # nested \frac / \sqrt, innermost first
        new = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", s)
        new = re.sub(r"\\sqrt\[(\d+)\]\{([^{}]*)\}", r"((\2)**(1/(\1)))", new)
        new = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", new)
        if new == s:
            break
        s = new
    s = s.replace("\\pi", "pi").replace("\\cdot", "*").replace("\\times", "*").replace("{", "(").replace("}", ")")
    s = s.replace("^", "**")
    if "\\" in s or len(s) > 120 or not re.fullmatch(r"[0-9a-z+\-*/(). ]*", s):
        return None
    if re.search(r"[a-z]{2,}", re.sub(r"sqrt|pi", "", s)):
        return None  # words: not an expression
    return s


def _to_sympy(s: str):
    py = _latex_to_py(s)
    if not py:
        return None
    names = {c: sympy.Symbol(c) for c in set(re.findall(r"[a-z]", re.sub(r"sqrt|pi", "", py)))}
    names.update(sqrt=sympy.sqrt, pi=sympy.pi, i=sympy.I)
    try:
        expr = parse_expr(py, local_dict=names, global_dict=_GLOBALS,
                          transformations=_TRANSFORMS, evaluate=False)
        if _too_big(expr):
            return None
        return expr.doit()
    except Exception:  # noqa: BLE001 (any parse failure means "not comparable as an expression")
        return None


def _digits(n: int) -> float:
    return max(1.0, abs(n).bit_length() * 0.30103)


def _too_big(expr) -> bool:
    """Would evaluating ``expr`` (parsed, unevaluated) make a number of more than ``MAX_DIGITS`` digits?

    Sizes are upper bounds in decimal digits, computed innermost first without evaluating anything
    big: a sum or product has at most the digits of its terms together; ``b^e`` at most ``|e|``
    times those of ``b`` (an exponent is evaluated only once its own bound is small). An expression
    with a symbol may be raised to at most ``MAX_EXPONENT`` (``(x+1)^{999}`` would be expanded)."""
    size: dict = {}
    for node in sympy.postorder_traversal(expr):
        if node in size:
            continue
        if node.is_Integer:
            digits = _digits(int(node))
        elif node.is_Rational:
            digits = _digits(int(node.p)) + _digits(int(node.q))
        elif node.is_Atom:  # symbols, floats, pi, i
            digits = 1.0
        elif node.is_Pow:
            base, exp = size[node.base], size[node.exp]
            if not node.exp.is_number:
                return True  # a symbolic exponent: x^y is no MATH answer worth a sympy call
            if exp > 5:
                return True
            power = abs(complex(node.exp.evalf(15)))
            if power > MAX_EXPONENT and node.base.free_symbols:
                return True
            digits = base * max(1.0, power)
        else:
            digits = sum(size[arg] for arg in node.args) + 1
        if digits > MAX_DIGITS:
            return True
        size[node] = digits
    return False


def _equal_expr(a, b) -> bool:
    try:
        if a.free_symbols or b.free_symbols:
            return sympy.simplify(a - b) == 0
        va, vb = complex(a.evalf()), complex(b.evalf())
        return abs(va - vb) <= 1e-6 * max(1.0, abs(va), abs(vb))
    except Exception:  # noqa: BLE001
        return False


def _parts(s: str) -> tuple[str, list[str]]:
    """Split '(1,2)' / '[0,1)' / '1,-2' into (brackets, elements) at top-level commas."""
    brackets = ""
    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]":
        brackets, s = s[0] + s[-1], s[1:-1]
    parts, depth, cur = [], 0, ""
    for ch in s:
        depth += ch in "({[" and 1 or ch in ")}]" and -1 or 0
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return brackets, parts


def equivalent(answer: str | None, gold: str) -> bool:
    """Is ``answer`` mathematically the same as ``gold``? Raises ``Unscorable`` past the time limit."""
    if answer is None:
        return False
    if len(answer) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return answer.strip() == gold.strip()
    a, g = normalize(answer), normalize(gold)
    if not a:
        return False
    if a == g:
        return True
    (ba, pa), (bg, pg) = _parts(a), _parts(g)
    if len(pa) != len(pg) or (len(pa) > 1 and ba != bg):
        return False
    if len(pa) > 1:
        return all(x == y or _scalar_equal(x, y) for x, y in zip(pa, pg))
    return _scalar_equal(a, g)


def _scalar_equal(a: str, g: str) -> bool:
    """Equal as sympy expressions, decided in the helper process under ``TIME_LIMIT_S``."""
    if _latex_to_py(a) is None or _latex_to_py(g) is None:
        return False  # cheap: nothing for sympy to do
    try:
        return bool(_SYMPY(a, g, limit=TIME_LIMIT_S))
    except TimeLimit:
        raise Unscorable(f"comparing {a[:40]!r} with {g[:40]!r} took over {TIME_LIMIT_S:g} s") from None


def sympy_equal(a: str, g: str) -> bool:
    """The sympy comparison itself (what the helper process runs)."""
    ea, eg = _to_sympy(a), _to_sympy(g)
    return ea is not None and eg is not None and _equal_expr(ea, eg)


_SYMPY = Bounded("softeval.tasks.mathnorm:sympy_equal")
