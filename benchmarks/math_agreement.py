"""MATH-500 matching: the old hand-written sympy normaliser against math-verify (issue 24), on the 500
gold answers against themselves, against LaTeX variants of themselves, and on the extracted answers
of real model outputs (the ``samples.jsonl`` of finished math500 runs). Prints one table and every
disagreement.

The old matcher is read from git at ``OLD`` (the last commit of the normaliser), so it needs this
checkout's history; its sympy comparison runs in this process (its size bounds still apply).

    PYTHONPATH=src .venv/bin/python benchmarks/math_agreement.py [RUN_ROOT_OR_FOLDER ...]
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
from collections import Counter
from fractions import Fraction
from pathlib import Path

from softeval.tasks import get_task
from softeval.tasks.base import Unscorable
from softeval.tasks.mathnorm import equivalent

OLD = "b55ba337857367858fb685e851f4a7a214cebc6c"  # src/softeval/tasks/mathnorm.py before math-verify
ROOT = Path(__file__).resolve().parents[1]


def old_matcher():
    """``equivalent`` of the normaliser at ``OLD``, its helper process replaced by a direct call."""
    code = subprocess.run(["git", "-C", str(ROOT), "show", f"{OLD}:src/softeval/tasks/mathnorm.py"],
                          check=True, capture_output=True, text=True).stdout
    module = types.ModuleType("old_mathnorm")
    exec(compile(code, "old_mathnorm.py", "exec"), module.__dict__)  # noqa: S102 (our own file, from git)
    module._SYMPY = lambda a, g, limit: module.sympy_equal(a, g)
    return module.equivalent


def _fraction(s: str) -> Fraction | None:
    m = re.fullmatch(r"(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}", s.strip())
    if m and int(m[3]):
        return Fraction(int(m[2]), int(m[3])) * (-1 if m[1] else 1)
    return None


def _decimal(f: Fraction) -> str | None:
    """``f`` as a terminating decimal, else None."""
    for places in range(1, 7):
        scaled = f * 10**places
        if scaled.denominator == 1:
            sign, digits = ("-" if scaled < 0 else ""), str(abs(scaled.numerator)).rjust(places + 1, "0")
            return f"{sign}{digits[:-places]}.{digits[-places:]}"
    return None


def variants(gold: str) -> list[tuple[str, str]]:
    """(kind, text) for each LaTeX variant that applies to ``gold``; each means the same as ``gold``."""
    s = gold.strip()
    out = [("$...$", f"${s}$"),
           ("spaces", re.sub(r"\s*,(?!\\!)\s*", ", ", re.sub(r"\s*([+\-=])\s*", r" \1 ", s)).strip()),
           ("no spaces", re.sub(r"\s*([+\-=,])\s*", r"\1", s))]
    if "\\frac" in s:
        out.append(("\\dfrac", s.replace("\\frac", "\\dfrac")))
    if re.search(r"\\frac\{\d\}\{\d\}", s):
        out.append(("\\frac12", re.sub(r"\\frac\{(\d)\}\{(\d)\}", r"\\frac\1\2", s)))
    if re.search(r"\\sqrt\{\d\}", s):
        out.append(("\\sqrt2", re.sub(r"\\sqrt\{(\d)\}", r"\\sqrt\1", s)))
    if re.search(r"[()\[\]]", s) and "\\left" not in s:
        out.append(("\\left/\\right", re.sub(r"([(\[])", r"\\left\1", re.sub(r"([)\]])", r"\\right\1", s))))
    fraction = _fraction(s)
    if fraction is not None:
        out.append(("a/b", f"{fraction.numerator}/{fraction.denominator}"))
        if _decimal(fraction):
            out.append(("0.5 for \\frac12", _decimal(fraction)))
    if re.fullmatch(r"-?\d+\.\d+", s):
        f = Fraction(s)
        out.append(("\\frac12 for 0.5", f"{'-' if f < 0 else ''}\\frac{{{abs(f.numerator)}}}{{{f.denominator}}}"))
    if re.fullmatch(r"-?\d+", s):
        out += [("x = n", f"x = {s}"), ("n.0", f"{s}.0")]
        if abs(int(s)) >= 1000:
            grouped = f"{int(s):,}"
            out += [("1,000", grouped), ("1{,}000", grouped.replace(",", "{,}")),
                    ("1\\,000", grouped.replace(",", "\\,"))]
    if re.fullmatch(r"-?\d+(?:\.\d+)?", s):
        out.append(("n\\%", f"{s}\\%"))
    unit = re.sub(r"\s*(?:\^\\circ|\\(?:text|mbox)\{\s*[a-z]+\s*\}(?:\^2)?)$", "", s.replace("\\$", ""))
    if unit and unit != s:
        out.append(("unit dropped", unit))
    if re.fullmatch(r"\\text\{[^{}]*\}", s):
        out.append(("no \\text{}", s[6:-1]))
    return out


def runs(paths: list[str]) -> list[Path]:
    """The finished math500 run folders under the given roots or folders (``samples.jsonl`` present)."""
    found = set()
    for path in map(Path, paths):
        found |= {p.parent for p in path.rglob("samples.jsonl") if "math500" in p.parts and ".partial" not in str(p)}
    return sorted(found)


def _check(match, answer: str | None, gold: str):
    try:
        return match(answer, gold)
    except Unscorable:
        return "unscorable"


Pairs = dict[str, list[tuple[str, str, bool | None]]]  # label -> (answer, gold, the right verdict if known)


def gold_pairs(golds: list[str]) -> Pairs:
    groups: Pairs = {"gold vs itself": [(g, g, True) for g in golds]}
    for g in golds:
        for kind, text in variants(g):
            groups.setdefault(f"gold vs {kind}", []).append((text, g, True))
    return groups


def run_pairs(paths: list[str]) -> Pairs:
    """The strict and the lenient answer of every output (when there is one), by run folder."""
    groups: Pairs = {}
    for folder in runs(paths):
        name = "/".join(folder.parts[-4:-1])
        for line in (folder / "samples.jsonl").read_text().splitlines():
            sample = json.loads(line)
            for which in ("strict", "lenient"):
                if sample.get(which) is not None:
                    groups.setdefault(f"{name} ({which})", []).append((sample[which], sample["gold"], None))
    return groups


def table(groups: Pairs, old, new) -> list[str]:
    """The markdown table (one row per label), then every pair on which ``old`` and ``new`` differ."""
    lines = ["| pairs | n | old: equal | math-verify: equal | both | old only | math-verify only | unscorable |",
             "|---|---|---|---|---|---|---|---|"]
    disagreements = []
    for label, pairs in groups.items():
        counts: Counter = Counter()
        for answer, gold, truth in pairs:
            a, b = _check(old, answer, gold), _check(new, answer, gold)
            counts["old"] += a is True
            counts["new"] += b is True
            counts["both"] += a is True and b is True
            counts["old only"] += a is True and b is not True
            counts["new only"] += b is True and a is not True
            counts["unscorable"] += "unscorable" in (a, b)
            if a != b:
                right = "" if truth is None else ("old" if a == truth else "math-verify")
                disagreements.append(f"- {label}: `{answer}` | `{gold}` | {a} | {b} | {right}")
        lines.append(f"| {label} | {len(pairs)} | {counts['old']} | {counts['new']} | {counts['both']} | "
                     f"{counts['old only']} | {counts['new only']} | {counts['unscorable']} |")
    lines.append(f"\n{len(disagreements)} disagreements (answer | gold | old | math-verify | right by construction)")
    return lines + disagreements


def main(paths: list[str]) -> None:
    golds = [e.gold for e in get_task("math500").load("offline").eval]
    print("\n".join(table({**gold_pairs(golds), **run_pairs(paths)}, old_matcher(), equivalent)))


if __name__ == "__main__":
    main(sys.argv[1:])
