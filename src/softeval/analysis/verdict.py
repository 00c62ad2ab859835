"""What a run's numbers mean, in words: one verdict per comparison of two methods on one model and task.

A verdict reads the paired test (McNemar's exact p, Tango's score interval for the difference), the
format_rate of both methods, the treated method's most frequent answer against the gold answers' and
the format-free reference of the reference method's run (the bare prompt: softeval.methods), and picks the first
rule that holds (``judge``).
The rules, their thresholds and why they say what they say are in docs/reference/verdicts.md; a
difference whose interval touches 0 or whose p is 0.05 or more never reads as a change.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from softeval import methods
from softeval.analysis.paired import PairedTest
from softeval.analysis.pairs import PairedRow, pair_of, paired_method_tests, runs_by_seed
from softeval.metrics import FOLLOWS_FORMAT, METRIC, Z95
from softeval.store.format import Run

ALPHA = 0.05  # a difference counts when McNemar's p is below this AND its 95% interval excludes 0
FORMAT_CHANGE = 0.10  # a format_rate change of at least this much is a change of format
PRIOR_SHARE = 0.50  # one answer on at least this share of the items ...
PRIOR_EXCESS = 0.20  # ... and this much above the gold answers' top share: a label prior ...
PRIOR_MIN_N = 16  # ... on at least this many items (docs/reference/verdicts.md: below it chance alone names one)
DETECT = 0.05  # the smallest difference the "n would detect" sentence speaks of
POWER = 0.80  # ... detected with this power at ALPHA
Z_POWER = 0.8416212335729143  # the standard normal's 80% quantile
SLACK = 1e-9  # thresholds hold at equality: 0.98 - 0.88 is 0.0999... in floats, 31/50 - 21/50 is 0.19999...



def who_of(method: str) -> str:
    """How a verdict names what ``method`` puts before the model (its spec's ``who``; an unregistered one: its
    name)."""
    return methods.spec_of(method).who if methods.known(method) else method


@dataclass(frozen=True)
class Side:
    """What a verdict reads of one method's run besides its per-item outcomes."""

    method: str
    format_rate: float | None
    top_answer: str | None  # the most frequent strict answer given (None: none was)
    top_count: int
    gold_top_count: int  # how often the most frequent gold answer occurs
    n: int
    permutation_consistency: float | None = None


@dataclass(frozen=True)
class Reference:
    """The format-free score beside the verdict: the reference method's run's cloze accuracy, or for free-form
    answers its lenient accuracy (the answer wherever a reader finds it in the output)."""

    name: str
    value: float


@dataclass(frozen=True)
class Verdict:
    task: str
    model: str
    baseline: Side
    treated: Side
    test: PairedTest
    reference: Reference | None
    rule: str
    sentence: str

    def numbers(self) -> str:
        """The figures the sentence rests on, one line."""
        t, b, s = self.test, self.baseline, self.treated
        parts = []
        if b.format_rate is not None and s.format_rate is not None:
            parts.append(f"format {b.format_rate:.2f} → {s.format_rate:.2f}")
        parts.append(f"accuracy {t.accuracy_a:.2f} → {t.accuracy_b:.2f}, {t.difference:+.2f} "
                     f"[{t.ci_low:+.2f}, {t.ci_high:+.2f}], McNemar p {_p(t.p_value)} (n={t.n})")
        if self.reference is not None:
            parts.append(f"format-free reference: {self.reference.name} {self.reference.value:.2f}")
        return "; ".join(parts)

    def title(self) -> str:
        return f"{self.treated.method} vs {self.baseline.method}"

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "model": self.model, "baseline": self.baseline.method,
                "treated": self.treated.method, "rule": self.rule, "sentence": self.sentence,
                "numbers": self.numbers(), "format_before": self.baseline.format_rate,
                "format_after": self.treated.format_rate,
                "reference": None if self.reference is None else vars(self.reference), **self.test.to_json()}


def _p(p: float | None) -> str:
    if p is None:
        return "-"
    return "< 0.0001" if p < 1e-4 else f"{p:.2g}"


def _at_least(value: float, threshold: float) -> bool:
    return value >= threshold - SLACK


def one_answer_dominates(side: Side) -> bool:
    """One answer for at least PRIOR_SHARE of the items and PRIOR_EXCESS above the commonest gold
    answer's share, at any n."""
    if side.top_answer is None or not side.n:
        return False
    share = side.top_count / side.n
    return _at_least(share, PRIOR_SHARE) and _at_least(share - side.gold_top_count / side.n, PRIOR_EXCESS)


def label_prior(side: Side) -> bool:
    """One answer dominates on at least PRIOR_MIN_N items: below that, chance alone makes one answer
    dominate too often to call it a prior."""
    return side.n >= PRIOR_MIN_N and one_answer_dominates(side)


def own_prior(baseline: Side, treated: Side) -> bool:
    """A label prior of the treated method that the baseline does not share: the same answer for most
    items under both is the model's habit, not something the treated method learned."""
    shared = label_prior(baseline) and baseline.top_answer == treated.top_answer
    return label_prior(treated) and not shared


def items_to_detect(test: PairedTest, difference: float) -> int:
    """Items a paired test needs to detect ``difference`` at ALPHA with POWER (Connor 1987, McNemar),
    taking the discordant share from this test (never below the difference itself)."""
    d = abs(difference)
    discordant = max((test.a_only + test.b_only) / test.n if test.n else 0.0, d)
    root = Z95 * math.sqrt(discordant) + Z_POWER * math.sqrt(max(discordant - d * d, 0.0))
    return math.ceil(root * root / (d * d))


def format_move(baseline: Side, treated: Side) -> tuple[str, str] | None:
    """How the treated method moved the format_rate, when it moved by FORMAT_CHANGE or more: ``fixed``
    (up to FOLLOWS_FORMAT or beyond), ``raised`` (up, still below it), ``broke`` (down from a format
    the model followed) or ``lowered`` (down otherwise); with its clause (its subject: the method)."""
    f0, f1 = baseline.format_rate, treated.format_rate
    if f0 is None or f1 is None:
        return None
    who = who_of(treated.method)
    if _at_least(f1 - f0, FORMAT_CHANGE):
        if _at_least(f1, FOLLOWS_FORMAT):
            return "fixed", f"{who} fixed the format ({f0:.2f} → {f1:.2f})"
        return "raised", f"{who} raised the format from {f0:.2f} to {f1:.2f} but did not reach {FOLLOWS_FORMAT:.2f}"
    if _at_least(f0 - f1, FORMAT_CHANGE):
        if _at_least(f0, FOLLOWS_FORMAT):
            return "broke", f"{who} broke a format the model followed: {f0:.2f} → {f1:.2f}"
        return "lowered", f"{who} lowered the format from {f0:.2f} to {f1:.2f}"
    return None


def unclaimed(test: PairedTest) -> str:
    """The accuracy clause where no change is claimed: true of the difference whatever its size."""
    target = max(abs(test.difference or 0.0), DETECT)
    need = items_to_detect(test, target) if test.n else 0
    detect = ("no items" if not test.n else f"n ≈ {need} would detect {target:+.2f}" if test.n < need
              else f"its {test.n} items would have detected {target:+.2f}, which needs n ≈ {need}")
    if test.a_only == test.b_only:
        return f"no difference in accuracy at this n ({detect})"
    if test.ci_low is not None and test.ci_high is not None and (test.ci_low > 0 or test.ci_high < 0):
        return (f"{test.difference:+.2f} in accuracy, its interval clear of 0 but McNemar's exact p "
                f"{_p(test.p_value)}: too few discordant items to call it a change ({detect})")
    return f"{test.difference:+.2f} in accuracy is within noise at this n ({detect})"


@dataclass(frozen=True)
class _Reading:
    """What the verdict rules read of one comparison, worked out once."""

    test: PairedTest
    baseline: Side
    treated: Side
    who: str  # how the sentence names the treated method
    up: bool  # a significant gain
    down: bool  # a significant loss
    followed: bool  # the baseline followed the format already
    kind: str | None  # format_move's kind, None where the format did not move
    moved: str  # format_move's clause, "" where the format did not move
    prior: str  # the treated method's own label prior, in figures ("" where it has none)

    @property
    def tail(self) -> str:
        return f" ({self.prior}: a label prior)" if self.prior else ""

    @property
    def lower(self) -> str:
        return f"{self.baseline.method} is the better prompt for this model and task"


def _prior_of(baseline: Side, treated: Side) -> str:
    """The treated method's own label prior in figures (``own_prior``), or ""."""
    if not own_prior(baseline, treated):
        return ""
    prior = f"top answer {treated.top_answer} {treated.top_count}/{treated.n}"
    if treated.permutation_consistency is not None:
        prior += f", {METRIC['permutation_consistency'].label} {treated.permutation_consistency:.2f}"
    return prior


def _reading(test: PairedTest, baseline: Side, treated: Side) -> _Reading:
    significant = test.p_value is not None and test.p_value < ALPHA
    up = significant and test.ci_low is not None and test.ci_low > 0
    down = significant and test.ci_high is not None and test.ci_high < 0
    f0 = baseline.format_rate
    followed = f0 is not None and _at_least(f0, FOLLOWS_FORMAT)
    kind, moved = format_move(baseline, treated) or (None, "")
    return _Reading(test, baseline, treated, who_of(treated.method), up, down, followed, kind, moved,
                    _prior_of(baseline, treated))


def _format_lost(r: _Reading) -> tuple[str, str]:
    """The treated method broke or lowered the format: whatever happened to the accuracy, that comes first."""
    if r.down:
        return "format-broken", f"{r.moved}; it scored lower than {r.baseline.method}: {r.lower}"
    if r.up:
        return "format-broken", (f"{r.moved}; yet more answers are right ({r.test.difference:+.2f})"
                                 + (f", mostly one answer ({r.prior}): not evidence of knowledge" if r.prior else ""))
    return "format-broken", f"{r.moved}; {unclaimed(r.test)}{r.tail}"


def _gain(r: _Reading) -> tuple[str, str]:
    """More answers are right, the format not lost: a label prior, knowledge the format hid, or better answers."""
    if r.prior:
        return "label-prior", (f"{r.who} mostly learned a label prior ({r.prior}): the gain of "
                               f"{r.test.difference:+.2f} is not evidence of knowledge")
    if r.kind == "fixed" and not r.followed:
        return "format-hid-knowledge", f"the format was hiding knowledge: {r.who} recovered it"
    if r.kind == "raised":
        return "format-hid-knowledge", (f"the format was hiding knowledge: {r.who} recovered some of it, raising "
                                        f"the format from {r.baseline.format_rate:.2f} to "
                                        f"{r.treated.format_rate:.2f} without reaching {FOLLOWS_FORMAT:.2f}")
    return "better-answers", (f"{r.who} changed the answers, not only their format: more of them are right"
                              + ("; the format was already followed" if r.followed else ""))


def _no_gain(r: _Reading) -> tuple[str, str]:
    """No more answers are right and the format not lost: worse, a format change alone, or no difference."""
    if r.down:
        return "worse", (f"{r.who} scored lower than {r.baseline.method}: {r.lower}"
                         + (f", though {r.moved}" if r.moved else ""))
    if r.kind == "fixed":
        return "format-only", f"{r.moved}; {unclaimed(r.test)}{r.tail}"
    if r.kind == "raised":
        return "format-partial", f"{r.moved}; {unclaimed(r.test)}{r.tail}"
    if r.followed:
        return "format-already-followed", (f"{unclaimed(r.test)}: the model already followed the format "
                                           f"({r.baseline.format_rate:.2f}), so there was little for {r.who} to "
                                           f"fix{r.tail}")
    return "no-difference", f"{unclaimed(r.test)}{r.tail}"


def judge(test: PairedTest, baseline: Side, treated: Side) -> tuple[str, str]:
    """The rule that holds and its sentence (docs/reference/verdicts.md): a lost format first, then a gain,
    then the rest."""
    r = _reading(test, baseline, treated)
    if r.kind in ("broke", "lowered"):
        return _format_lost(r)
    return _gain(r) if r.up else _no_gain(r)


def side_of(run: Run) -> Side:
    answers = run.results.get("answers") or {}
    given = [(a, int(c)) for a, c in answers.get("strict") or [] if a is not None]  # "no answer" is no prior
    gold = answers.get("gold") or []
    top, count = given[0] if given else (None, 0)
    return Side(run.method, (run.metric("format_rate") or {}).get("value"), top, count,
                int(gold[0][1]) if gold else 0, int(run.results.get("n") or 0),
                (run.metric("permutation_consistency") or {}).get("value"))


def reference_of(run: Run | None) -> Reference | None:
    if run is None:
        return None
    for metric in ("cloze_accuracy", "lenient_accuracy"):
        value = (run.metric(metric) or {}).get("value")
        if value is not None:
            return Reference(METRIC[metric].short, value)
    return None


def other_settings(differs: Sequence[str], baseline: str, treated: str) -> str:
    """The sentence where two runs differ in more than their method (``PairedRow.differs``): no reading of it."""
    named = "; ".join(differs[:2]) + (f"; and {len(differs) - 2} more" if len(differs) > 2 else "")
    return (f"not judged: the {treated} and {baseline} runs differ in more than their method ({named}), so their "
            "difference is not the method's alone; score both with the same settings (--force replaces a finished "
            "run)")


def _reference_runs(found: dict[tuple[str, str, str], dict[int, Run]], task: str, model: str) -> dict[int, Run] | None:
    """The runs by seed of the REFERENCE method (the bare prompt) on ``task`` and ``model``, if any."""
    return next((found[key] for m in methods.with_role(methods.REFERENCE) if (key := (task, model, m)) in found),
                None)


def verdicts(runs: Sequence[Run], tests: Sequence[PairedRow] | None = None) -> list[Verdict]:
    """Per task and model (the runs of one seed: pairs.pair_of) the comparisons of ``methods.pairs()``: the
    treatment against the reference and each baseline, or a baseline against the reference when no treatment ran
    (the registry's roles). ``tests``: the paired tests of ``methods.pairs()`` on accuracy when the caller has them
    already (``paired_method_tests(runs, pairs=methods.pairs())``)."""
    found = runs_by_seed(runs)
    baselines, treatments = methods.with_role(methods.BASELINE), methods.with_role(methods.TREATMENT)
    out = []
    for row in paired_method_tests(runs, pairs=methods.pairs()) if tests is None else tests:
        a, b = row.test.a, row.test.b
        if b in baselines and any((row.task, row.model, t) in found for t in treatments):
            continue
        run_a, run_b = row.runs
        base, treated = side_of(run_a), side_of(run_b)
        rule, sentence = ("other-settings", other_settings(row.differs, a, b)) if row.differs \
            else judge(row.test, base, treated)
        zero = _reference_runs(found, row.task, row.model)  # the reference method's, of the treated run's seed
        reference = reference_of(pair_of(zero, {run_b.seed: run_b})[0] if zero else None)
        out.append(Verdict(row.task, run_a.model, base, treated, row.test, reference, rule, sentence))
    return out
