"""Why did an output fail the strict format? One cause per failed sample, counted per run.

A format failure is not one thing: an empty output, an answer cut off by ``max_new_tokens``, a right
answer written the wrong way ("The answer is B", the option's text instead of its letter), a
refusal or the question echoed back are different problems with different cures (a longer budget,
a soft prompt, a chat template). Causes are tried in this order, the first that fits wins:

- ``empty``: nothing but whitespace;
- ``refusal_or_echo``: an apology or refusal, or the output repeats the prompt (its first line opens
  with a stretch of the prompt that is not just one option's text, or it starts a new "Question:");
- ``wrong_style``: the lenient reader found an answer, so the model answered, in another form; for
  a free-form task this counts only if the output ended by itself (a cut-off chain of thought
  leaves numbers behind that are no answer) or marked an answer of its own (``Task.answer_marked``:
  GSM8K's "#### 4 pizzas", then the same line again to the limit, is a style, not a budget, to fix);
- ``max_new_tokens``: the output hit the token limit before any answer;
- ``other``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

CAUSES = ("empty", "max_new_tokens", "wrong_style", "refusal_or_echo", "other")
ECHO_MIN_CHARS = 16
_REFUSAL = re.compile(
    r"\b(?:i\s*(?:'m|am)\s+(?:sorry|not\s+(?:able|sure)|unable)|i\s+can(?:no|')t|i\s+cannot"
    r"|i\s+(?:do\s+not|don't)\s+know|as\s+an\s+ai\b|sorry\b|i\s+apologi[sz]e|unable\s+to\s+(?:answer|determine))",
    re.IGNORECASE)
_NEW_ITEM = re.compile(r"\s*(?:question|passage|problem|q)\s*:", re.IGNORECASE)


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def is_echo(output: str, prompt: str, options: Sequence[str] = ()) -> bool:
    """Does the output repeat the prompt rather than answer it? It starts a new "Question:", or its
    first line begins with a stretch of the prompt (``ECHO_MIN_CHARS`` or more) that is not just
    one option's text (an option's text is an answer in the wrong style)."""
    if _NEW_ITEM.match(output):
        return True
    first = next((line for line in output.splitlines() if line.strip()), "")
    words, squashed = _squash(first).split(" "), _squash(prompt)
    copied = ""
    for k in range(len(words), 0, -1):  # the longest run of leading words found in the prompt
        head = " ".join(words[:k])
        if head in squashed:
            copied = head
            break
    if len(copied) < ECHO_MIN_CHARS:
        return False
    return not any(copied in _squash(option) for option in options)


def failure_cause(sample: dict, prompt: str, options: Sequence[str] = (), multiple_choice: bool = False,
                  hit_limit: bool | None = None, marked: bool = False) -> str | None:
    """The cause of a strict-format failure (one of ``CAUSES``), or None when the format was followed;
    ``marked``: the output marks an answer of its own (``Task.answer_marked``)."""
    if sample.get("format_ok"):
        return None
    output = str(sample.get("output") or "")
    if not output.strip():
        return "empty"
    if _REFUSAL.search(output) or is_echo(output, prompt, options):
        return "refusal_or_echo"
    answered = sample.get("lenient") is not None
    if answered and (multiple_choice or not hit_limit or marked):
        return "wrong_style"
    if hit_limit:
        return "max_new_tokens"
    return "other"


def count_causes(samples: Sequence[dict]) -> dict:
    """Per run: every cause with its count (zeros included), and outputs that hit the token limit."""
    counts = Counter(s.get("failure") for s in samples if s.get("failure"))
    return {"causes": {cause: counts.get(cause, 0) for cause in CAUSES},
            "failed": sum(counts.values()),
            "hit_max_new_tokens": sum(1 for s in samples if s.get("hit_max_new_tokens"))}
