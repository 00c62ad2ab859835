"""Belebele: multilingual reading comprehension (FLORES passages), 4 options, 900 questions per
language. English (``eng_Latn``) by default; any of its 122 language variants by name.

Format: the output starts with the option letter; plus ``letter_loglik_accuracy`` and the cloze scores.
Belebele is in no
package, so there is no offline copy: ``--source hub`` (English), ``--source hub:fra_Latn`` (any
config name of ``facebook/belebele``), or ``--source path/to/eng_Latn.jsonl`` (a file in the
dataset's own schema). Belebele has only one split per language, so tuning uses a seeded held-out
part (300) and the rest (600) is scored.
"""

from __future__ import annotations

import re

from softeval.errors import UserError
from softeval.tasks.base import (
    HELD_OUT_SEED,
    Example,
    Splits,
    cloze_question,
    file_n_tune,
    held_out_splits,
    letter_gold,
    multiple_choice,
    render_mc,
    source_loader,
)
from softeval.tasks.data import convert_rows, read_hub, require_fields

HUB = "facebook/belebele"
DEFAULT_LANGUAGE = "eng_Latn"
HELD_OUT_TUNE = 300  # 900 = 300 tuning + 600 scored
FIELDS = ("flores_passage", "question", "mc_answer1", "mc_answer2", "mc_answer3", "mc_answer4",
          "correct_answer_num")
LANGUAGE_SOURCE = "hub:fra_Latn"  # how another language is asked for
NO_OFFLINE = ("Belebele is in no package, so it has no offline copy: use --source hub (English), "
              f"--source hub:<language> (e.g. {LANGUAGE_SOURCE}), or --source path/to/file.jsonl")


def to_example(row: dict, ident: str, where: str, index: int) -> Example:
    require_fields(row, FIELDS, where, index)
    options = tuple(str(row[f"mc_answer{k}"]) for k in range(1, 5))
    gold = letter_gold(row["correct_answer_num"], len(options), where, index, one_based=True)
    ident = f"{row.get('dialect', '')}/{row.get('link', '')}#{row.get('question_number', '')}" \
        if row.get("link") else ident
    return Example(id=ident, fields={"passage": str(row["flores_passage"]), "question": str(row["question"])},
                   gold=gold, options=options)


def render(example: Example) -> str:
    return render_mc(example.fields["question"], example.options,
                     header=f"Passage: {example.fields['passage'].strip()}")


def cloze(example: Example) -> str:
    return cloze_question(example.fields["question"], header=f"Passage: {example.fields['passage'].strip()}")


def language(source: str) -> str | None:
    """'hub' -> eng_Latn, 'hub:fra_Latn' -> fra_Latn; None for a file path."""
    if source == "hub":
        return DEFAULT_LANGUAGE
    if source.startswith("hub:"):
        lang = source[4:].strip()
        if not re.fullmatch(r"[a-z]{3}_[A-Z][a-z]{3}", lang):
            raise UserError(f"--source {source}: a Belebele language is written like eng_Latn or fra_Latn")
        return lang
    return None


def _hub(skip_bad_rows: bool, config: str | None) -> Splits:
    lang = language(f"hub:{config}" if config else "hub")
    where = f"{HUB}/{lang}:test"
    examples, skipped = convert_rows(read_hub(HUB, lang, "test"), lambda r, i: to_example(r, f"{lang}/{i}", where, i),
                                     where, skip_bad_rows)
    origin = f"hub ({HUB}, {lang})"
    return held_out_splits(examples, file_n_tune(len(examples), HELD_OUT_TUNE), HELD_OUT_SEED, origin, "test",
                           skipped)


load = source_loader(to_example, offline=None, hub=_hub, n_tune=HELD_OUT_TUNE, hub_configs=True,
                     no_offline=NO_OFFLINE, default="hub")


TASK = multiple_choice(
    name="belebele",
    description="Belebele multilingual reading comprehension, 4 options (eng_Latn default; --source hub:<lang>)",
    instruction="Read the passage and answer the multiple choice question with the letter of the correct option.",
    render=render,
    load=load,
    sources=("hub", "file"),
    cloze=cloze,
    source_example=LANGUAGE_SOURCE,
)
