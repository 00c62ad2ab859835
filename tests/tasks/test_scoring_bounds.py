"""Scoring that cannot be stalled: MATH-500's matcher bounds the work of every comparison
(sizes checked on the parsed expression, a hard time limit in a helper process that marks the item
unscorable, given up within that limit), and every task's strict and lenient extractors and matcher, fuzzed
with arbitrary text, deeply nested braces, huge numbers and long outputs, return and never raise. No test
here times its work: the bounds asserted are behaviour (a stalled call is cut at its limit), with margins
far wider than the limits; how fast scoring is belongs to the benchmark scripts.

``SOFTEVAL_FUZZ_EXAMPLES=N`` runs N examples per property (default 80).
"""

from __future__ import annotations

import json
import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny import format_task

from softeval import tasks
from softeval.bounded import Bounded, TimeLimit
from softeval.run.scoring import score_output
from softeval.tasks import TASKS
from softeval.tasks.base import Example, Unscorable
from softeval.tasks.custom import load_task_file
from softeval.tasks.mathcheck import _too_big, verified
from softeval.tasks.mathnorm import equivalent, last_boxed

EXAMPLES = int(os.environ.get("SOFTEVAL_FUZZ_EXAMPLES", "80"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
STALL_S = 60  # a call that would hold its helper this long; cut at its limit, it returns in far less
MARGIN_S = 15  # beyond a limit: killing and reaping the helper, on a loaded machine


def test_math_matcher_nested_power_tower_is_refused_before_evaluation():
    import sympy
    from sympy.parsing.sympy_parser import parse_expr

    tower = parse_expr("((9**999)**999)**999", evaluate=False)
    assert _too_big(tower)  # ~10^9 digits, found without computing one of them
    assert not _too_big(parse_expr("(9**999)", evaluate=False))
    assert not equivalent(r"\boxed{((9^{999})^{999})^{999}}", "1")
    assert not equivalent(r"((9^{999})^{999})^{999}", r"((9^{999})^{999})^{999}0")
    assert _too_big(parse_expr("factorial(100000)", evaluate=False))  # 100000! ~ 456,574 digits
    assert not _too_big(parse_expr("factorial(100)", evaluate=False))
    assert not verified(r"9^{9^{9^{9}}}", "1") and not verified("100000!", "1")
    assert not verified(r"(x+1)^{999}", "x")  # expansion refused (powers of a variable at most 100)
    assert verified(r"2^{10}", "1024") and verified(r"(x+1)^{2}", "x^2+2x+1") and verified("5!", "120")
    assert sympy.Integer(9) ** 999 > 0  # (sympy itself is fine with the single power)


def test_time_limit_kills_the_helper_within_its_limit_and_the_next_call_works():
    sleeper = Bounded("time:sleep")
    assert sleeper(0, limit=120) is None  # the helper started: what follows is the call alone
    started = time.monotonic()
    with pytest.raises(TimeLimit):
        sleeper(STALL_S, limit=0.2)
    assert time.monotonic() - started < 0.2 + MARGIN_S < STALL_S
    assert sleeper(0, limit=120) is None
    sleeper.close()


def test_the_math_matcher_gives_up_within_its_time_limit(monkeypatch):
    """A comparison that stalls its helper is cut at mathnorm's TIME_LIMIT_S: the item is unscorable."""
    from softeval.tasks import mathnorm

    sleeper = Bounded("time:sleep")
    assert sleeper(0, limit=120) is None
    monkeypatch.setattr(mathnorm, "TIME_LIMIT_S", 0.5)
    monkeypatch.setattr(mathnorm, "_VERIFY", lambda answer, gold, limit: sleeper(STALL_S, limit=limit))
    started = time.monotonic()
    with pytest.raises(Unscorable, match=r"^comparing '2x' with 'x\+x' took over 0.5 s$"):
        equivalent("2x", "x+x")
    assert time.monotonic() - started < 0.5 + MARGIN_S < STALL_S
    sleeper.close()


def test_matcher_past_its_time_limit_marks_the_item_unscorable(monkeypatch, tmp_path):
    from tiny import tiny_lm

    from softeval.run.config import RunConfig
    from softeval.run.pipeline import run_job

    task = format_task()

    def slow_match(answer, example):
        if example.gold in "abc":
            raise Unscorable("too slow")
        return answer == example.gold

    task = type(task)(**{**task.__dict__, "match": slow_match})
    monkeypatch.setitem(tasks.TASKS, task.name, task)
    sample = score_output(task, Example("x", {}, "a"), "#a")
    assert sample["unscorable"] and not sample["correct"] and not sample["lenient_correct"]
    assert "unscorable" not in score_output(task, Example("y", {}, "h"), "#h")
    (result,) = run_job(RunConfig(model="tiny-0", task=task.name, methods=("zero-shot",), limit=12,
                                  out=str(tmp_path), eval_batch_size=12, device="cpu"), lm=tiny_lm())
    golds = [json.loads(line) for line in next(tmp_path.rglob("samples.jsonl")).read_text().splitlines()]
    assert result["unscorable"] == sum(s["gold"] in "abc" for s in golds) > 0


def test_last_boxed_is_one_pass_on_unbalanced_braces():
    assert last_boxed("\\boxed{" * 5000 + "1") is None
    assert last_boxed("\\boxed{" * 3 + "1}") == "1"
    assert last_boxed(r"\boxed{a} \boxed{\frac{1}{2}}") == r"\frac{1}{2}"


# ---- fuzzing every task ----------------------------------------------------------------------

OPTIONS = ("Paris", "a cat", "42", "none of the above")
EXAMPLES_BY_TASK = {
    "mmlu": Example("m", {"question": "q", "subject": "s"}, "B", options=OPTIONS),
    "arc_challenge": Example("a", {"question": "q"}, "C", options=OPTIONS),
    "arc_easy": Example("a", {"question": "q"}, "A", options=OPTIONS[:3]),
    "hellaswag": Example("h", {"context": "c"}, "D", options=OPTIONS),
    "belebele": Example("b", {"passage": "p", "question": "q"}, "A", options=OPTIONS),
    "boolq": Example("q", {"passage": "p", "question": "q"}, "yes"),
    "gsm8k": Example("g", {"question": "q", "solution": "s"}, "18"),
    "math500": Example("x", {"problem": "p", "solution": "s"}, r"\frac{\sqrt{3}}{2}"),
    "triviaqa": Example("t", {"question": "q"}, "Sunset Boulevard", aliases=("Sunset Blvd",)),
    "squad": Example("s", {"question": "q", "context": "c"}, "the Normans", aliases=("Normans",)),
}

ATOMS = st.one_of(st.integers(-10**6, 10**6).map(str), st.sampled_from(["x", "y", r"\pi", "i", "0.5", "e", "9"]))
LATEX = st.recursive(ATOMS, lambda inner: st.one_of(
    st.tuples(inner, inner).map(lambda t: f"{t[0]}^{{{t[1]}}}"),
    st.tuples(inner, inner).map(lambda t: f"({t[0]})^{{{t[1]}}}"),
    st.tuples(inner, inner).map(lambda t: f"\\frac{{{t[0]}}}{{{t[1]}}}"),
    inner.map(lambda a: f"\\sqrt{{{a}}}"),
    st.tuples(inner, inner, st.sampled_from(["+", "-", "\\cdot ", ""])).map(lambda t: f"{t[0]}{t[2]}{t[1]}"),
    st.tuples(inner, inner).map(lambda t: f"({t[0]},{t[1]})"),
), max_leaves=10)
PIECES = st.sampled_from([" ", "\n", "{", "}", "\\boxed{", "$", "answer is ", "####", "(A)", "A ", "9^{999}",
                          "1,234.5", "\\frac{", "yes", "No.", "Answer:", "the", "\t", ".", "-", "B) ", "x ="])
OUTPUTS = st.one_of(
    st.text(max_size=3000),
    st.lists(PIECES, max_size=400).map("".join),
    st.tuples(st.text(max_size=12), st.integers(0, 6000)).map(lambda t: t[0] * t[1]),  # long repeats
    st.integers(0, 5000).map(lambda n: "\\boxed{" * n + "1" + "}" * (n // 2)),  # deep braces
    st.integers(-(10**4000), 10**4000).map(str),  # huge numbers
    LATEX.map(lambda s: f"so the answer is $\\boxed{{{s}}}$"),
    LATEX,
)


def _score(name: str, example: Example, output: str) -> None:
    """One item as the pipeline scores it (both extractors, both matches): answers are text or None, matches
    True or False, or the item unscorable."""
    task = TASKS[name]
    for extract in (task.strict, task.lenient):
        answer = extract(output, example)
        assert answer is None or isinstance(answer, str)
        try:
            assert task.match(answer, example) in (True, False)
        except Unscorable:
            pass


@FUZZ
@given(name=st.sampled_from(sorted(EXAMPLES_BY_TASK)), output=OUTPUTS)
def test_fuzz_every_task_extractors_and_matcher(name, output):
    _score(name, EXAMPLES_BY_TASK[name], output)


@FUZZ
@given(answer=LATEX, gold=LATEX)
def test_fuzz_math_matcher_on_expressions(answer, gold):
    example = Example("x", {}, gold)
    _score("math500", example, f"\\boxed{{{answer}}}")
    _score("math500", Example("x", {}, answer), gold)


@FUZZ
@given(output=OUTPUTS, letters=st.integers(2, 26))
def test_fuzz_custom_task_readers(tmp_path_factory, output, letters):
    folder = tmp_path_factory.mktemp("custom")
    specs = {"mc": ({"options_field": "opts"}, "A"),
             "numeric": ({"answer_regex": r"(?m)^\s*(\S+)", "matcher": "numeric"}, "7"),
             "f1": ({"answer_regex": r"^(.*)$", "matcher": "f1"}, "a cat")}
    for name, (spec, gold) in specs.items():
        rows = [{"q": "q", "opts": [f"option {k}" for k in range(letters)], "a": gold}] * 3
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        path = folder / f"{name}.json"
        path.write_text(json.dumps({"data": f"{name}.jsonl", "prompt": "{{ q }}", "answer_field": "a", **spec}))
        task = load_task_file(path)
        example = task.load().eval[0]
        for extract in (task.strict, task.lenient):
            assert task.match(extract(output, example), example) in (True, False)
