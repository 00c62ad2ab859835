"""Short-answer helpers shared by TriviaQA and SQuAD: the official SQuAD v1.1 normalisation, exact
match and token F1 against every alias, the first-line extractors, and ``short_answer``, the Task
they make together.

Strict: the first line of the output, once stripped of a leading "Answer:" and trailing
punctuation, is the answer (a short answer on the first line is the required format). Lenient: any
alias contained (normalised, on word boundaries) anywhere in the output; otherwise the first line.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any

from softeval.tasks.base import Example, Task, gold_target

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 evaluate.py: lower case, drop punctuation and articles, collapse white space."""
    text = str(text).lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def token_f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = Counter(pred) & Counter(ref)
    same = sum(common.values())
    if same == 0:
        return 1.0 if not pred and not ref else 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def answers(example: Example) -> tuple[str, ...]:
    return (example.gold, *example.aliases)


def match_any(answer: str | None, example: Example) -> bool:
    """Exact match after normalisation against the gold answer or any alias."""
    if answer is None:
        return False
    norm = normalize_answer(answer)
    return bool(norm) and any(norm == normalize_answer(a) for a in answers(example))


def f1_max(answer: str | None, example: Example) -> float:
    """Token F1 with the best-matching alias (0 when there is no answer)."""
    if answer is None:
        return 0.0
    return max(token_f1(answer, a) for a in answers(example))


_LEAD = re.compile(r"^\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is)?\s*[:\-]?\s*", re.IGNORECASE)


def strict_first_line(output: str, example: Example) -> str | None:
    """The first non-empty line, without an 'Answer:' label, quotes or a final full stop; None when
    the output is empty or the line is long prose (more than 12 words is no short answer)."""
    lines = [line for line in output.splitlines() if line.strip()]
    if not lines or not output.lstrip(" ").startswith(lines[0].lstrip(" ")):
        return None
    line = _LEAD.sub("", lines[0].strip()) if re.match(r"^\s*answer\s*:", lines[0], re.IGNORECASE) else lines[0]
    line = line.strip().strip("\"'“”").rstrip(".!").strip()
    if not line or len(line.split()) > 12:
        return None
    return line


def lenient_contains(output: str, example: Example) -> str | None:
    """The alias found in the output (the longest, when several are), else the first line as is."""
    text = f" {normalize_answer(output)} "
    found = [a for a in answers(example) if normalize_answer(a) and f" {normalize_answer(a)} " in text]
    if found:
        return max(found, key=lambda a: len(normalize_answer(a)))
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[0] if lines else None


def short_answer(**spec: Any) -> Task:
    """A short-answer Task, as SQuAD and TriviaQA are: tuned to write the gold answer (``gold_target``),
    read by ``strict_first_line`` and ``lenient_contains``, matched against every alias by ``match_any``,
    with the best alias's token F1 as ``f1``. ``spec``: the rest of the Task (name, render, load, ...)."""
    return Task(**{"target": gold_target, "strict": strict_first_line, "lenient": lenient_contains,
                   "match": match_any, "extra": {"f1": f1_max}, **spec})
