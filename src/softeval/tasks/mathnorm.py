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
letters, sqrt and pi), with a size limit, so a model's output cannot run code or stall scoring.
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

MAX_EXPONENT = 1000  # larger powers are not evaluated: scoring must stay fast
_GLOBALS = {"__builtins__": {}, **{n: getattr(sympy, n) for n in (
    "Integer", "Float", "Rational", "Symbol", "Add", "Mul", "Pow", "UnevaluatedExpr")}}
_TRANSFORMS = standard_transformations + (implicit_multiplication_application, convert_xor)


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces, else None."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    for start in reversed(starts):
        depth = 1
        for pos in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[pos], 0)
            if depth == 0:
                return text[start:pos].strip()
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
        for node in sympy.postorder_traversal(expr):  # innermost first: towers are caught before evaluation
            if node.is_Pow and node.exp.is_number and abs(complex(node.exp.evalf())) > MAX_EXPONENT:
                return None
        return expr.doit()
    except Exception:  # noqa: BLE001 (any parse failure means "not comparable as an expression")
        return None


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
    if answer is None:
        return False
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
    ea, eg = _to_sympy(a), _to_sympy(g)
    return ea is not None and eg is not None and _equal_expr(ea, eg)
