"""The task file (docs/reference/task-format.md), declared once: every setting, whether it is
required, its type, range or choices, what it means, and how a wrong value is refused. tasks/custom.py reads
every task file through ``TaskFile`` (``checked``); `softeval schema task` prints it as JSON Schema, which an
editor checks a task file against as it is typed. Templates and regular expressions are compiled, and the data
rows read, by tasks/custom.py.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, WrapValidator, model_validator

from softeval.constants import ONE_LINE, TARGET_KINDS
from softeval.declared import (
    MISSING,
    UNKNOWN,
    Declared,
    NonBlank,
    Problem,
    Refused,
    check,
    json_schema,
    refusal,
    said,
)
from softeval.errors import UserError
from softeval.tasks.base import HELD_OUT_SEED

MATCHERS = ("exact", "numeric", "f1")


def _must(what: str) -> WrapValidator:
    """A setting's refusal: ``stop must be a string or a list of non-empty strings, not int 5``."""
    return said(f"{{key}} must be {what}, not {{type}} {{value}}")


Text = Annotated[str, _must("a string")]
FilePath = Annotated[NonBlank, _must("a file path")]
FieldName = Annotated[NonBlank, _must("a field name")]
_Word = Annotated[str, Field(min_length=1)]


class Split(Declared):
    """split: how the data file is held out when there is no tune_data."""

    seed: Annotated[int, said("{key} must be a whole number, not {value}"),
                    Field(description="the seed of the shuffle the split cuts")] = HELD_OUT_SEED
    n_tune: Annotated[int | None, Field(ge=1, description="this many items tune, the rest are scored"),
                      said("{key} must be a whole number of at least 1, not {value}")] = None
    fraction: Annotated[float | None, Field(gt=0, lt=1, description="this share of the items tunes (or n_tune)"),
                        said("{key} must be between 0 and 1, not {value}")] = None

    @model_validator(mode="after")
    def _one_size(self) -> Split:
        if self.n_tune is not None and self.fraction is not None:
            raise refusal("split: give n_tune or fraction, not both")
        return self


class TaskFile(Declared):
    """A task file: a data file of rows, a prompt template, the gold answer's field and the strict format."""

    # for an editor: the strict format is answer_regex, or the option letter of a multiple-choice task
    model_config = ConfigDict(json_schema_extra={"anyOf": [{"required": ["answer_regex"]},
                                                           {"required": ["options_field"]}]})

    name: Annotated[Text | None, Field(description="shown in results (default: the file's name)")] = None
    description: Annotated[Text | None, Field(description="shown in results")] = None
    data: Annotated[FilePath, Field(description="the scored data file (jsonl, json, csv or parquet), relative "
                                                "to this file; --source FILE replaces it")]
    tune_data: Annotated[FilePath | None, Field(description="a separate tuning file; then all of data is scored")] \
        = None
    split: Annotated[Split | None, _must("a mapping"),
                     Field(description="without tune_data: {seed, n_tune} or {seed, fraction}; default: a third "
                                       "(at most 1,000) tunes, seed 1234")] = None
    fields: Annotated[list[_Word] | None, _must("a list of field names"),
                      Field(description="fields every row must have")] = None
    answer_field: Annotated[FieldName, Field(description="the field with the gold answer (multiple choice: the "
                                                         "option's letter, text or 0-based index)")]
    aliases_field: Annotated[FieldName | None, Field(description="other accepted answers (a list, or one string)")] \
        = None
    options_field: Annotated[_Word | Annotated[list[_Word], Field(min_length=2)] | None,
                             _must("a field name or a list of field names"),
                             Field(description="makes the task multiple choice: one field holding the list of "
                                               "options, or one field per option")] = None
    id_field: Annotated[FieldName | None, Field(description="a stable item id (default: file name/row number)")] \
        = None
    instruction: Annotated[Text | None, Field(description="text put before every prompt")] = ""
    prompt: Annotated[Text, Field(description="Jinja template of one item, ending where the answer starts")]
    cloze_prompt: Annotated[Text | None, Field(description="multiple choice: the template each option's text "
                                                           "continues for the cloze scores (default: prompt)")] = None
    target: Annotated[Text | None, Field(description="Jinja template of what the soft prompt is tuned to write "
                                                     "(gold: the answer); it must pass answer_regex")] \
        = " {{ gold }}"
    answer_regex: Annotated[Text | None, Field(description="the strict format: a Python regex searched in the "
                                                           "output, its first group the answer; required unless "
                                                           "options_field")] = None
    lenient_regex: Annotated[Text | None, Field(description="like answer_regex, for lenient_accuracy")] = None
    matcher: Annotated[Literal[MATCHERS] | None, said("{key} {value} is not one of " + ", ".join(MATCHERS)),
                       Field(description="exact (SQuAD normalisation), numeric, or f1 (exact, plus token F1)")] \
        = "exact"
    stop: Annotated[_Word | list[_Word] | None, _must("a string or a list of non-empty strings"),
                    Field(description="where generation stops")] = "\n"
    max_new_tokens: Annotated[int | None, Field(ge=1, le=32768), _must("a whole number from 1 to 32768"),
                              Field(description="the most tokens generated per item")] = 32
    target_kind: Annotated[Literal[TARGET_KINDS] | None, _must(" or ".join(TARGET_KINDS)),
                           Field(description="one-line (a letter, a word, a short answer) or worked-solution "
                                             "(reasoning that ends in an answer line)")] = ONE_LINE

    @classmethod
    def as_read(cls, data: dict) -> dict:
        """`key:` without a value is as if the setting were not written; so is a required one left empty."""
        return {k: v for k, v in data.items()
                if v is not None and not (v == "" and cls.model_fields[k].is_required())}

    @model_validator(mode="after")
    def _strict_format(self) -> TaskFile:
        if self.options_field is not None and self.matcher == "numeric":
            raise refusal("a multiple-choice task (options_field) is matched by letter: leave matcher as exact")
        if self.options_field is None and self.answer_regex is None:
            raise refusal("answer_regex is required (the strict answer format) unless options_field is set")
        return self


def checked(spec: Any, where: str) -> TaskFile:
    """A parsed task file read as ``TaskFile``; its first mistake is one UserError starting with ``where``."""
    try:
        return check(TaskFile, spec)
    except Refused as refused:
        raise UserError(f"{where}: {_words(refused.problem)}") from None


def _words(problem: Problem) -> str:
    key = ".".join(map(str, problem.at))
    if problem.kind == UNKNOWN and not problem.at:
        return (f"unknown setting(s) {', '.join(map(str, problem.keys))}; "
                f"allowed: {', '.join(sorted(problem.allowed))}")
    if problem.kind == UNKNOWN:
        return f"{key} must be a mapping with {', '.join(problem.allowed)} (not {', '.join(map(str, problem.keys))})"
    if problem.kind == MISSING:
        return f"lacks the required setting(s) {', '.join(problem.keys)}"
    return problem.words(key)


def task_file_schema() -> dict[str, Any]:
    """The task file as JSON Schema (`softeval schema task`)."""
    return json_schema(TaskFile, "softeval task file", "A task softeval runs without code "
                       "(docs/reference/task-format.md): `softeval run --model M --task path/to/task.yaml`.")
