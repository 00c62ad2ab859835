"""The records of a run folder declared as pydantic models, as task files and sweep files are (softeval.declared):
results.json (``ResultsRecord``: every key in the order it is written, its type), a samples.jsonl row
(``SampleRow``) and a curve.jsonl row (``CurveRow``). The run fills a ``ResultsRecord`` (softeval.run.pipeline),
every reader checks what it reads through these models (softeval.store.format: ``check_results``, ``sample_problem``,
``curve_problem``), and ``softeval schema results|samples|curve`` prints them as JSON Schema.
docs/reference/run-format.md describes each key (tests/store/test_record.py holds the page and the models together).

pydantic is imported here only: the readers import this module when they first check a file, so `softeval --help`
and a listing over a current runs index import no pydantic (tests/cli/test_imports.py).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema

from softeval.declared import json_schema, said
from softeval.errors import shown
from softeval.store.record import CURVE_FILE, RESULTS_FILE, RESULTS_FORMAT_VERSION, SAMPLES_FILE, RunFormatError


def _is(what: str):
    """How a key refuses a value of another type: ``results.json 'n' is not a count of items``."""
    return said(f"{{key}} is not {what}")


# The types of the records' keys, each with what a value of another type is said not to be. Strict: JSON's true
# is no integer, "1" no number; an integer is a number, and stays an integer (as_json gives back the file's 60, not
# 60.0: pydantic's float would turn it into one).
Integer = Annotated[int, _is("an integer")]
Count = Annotated[int, Field(ge=0), _is("a count of items")]  # an integer that is not negative
Number = Annotated[int | float, WithJsonSchema({"type": "number"}), _is("a number")]
Text = Annotated[str, _is("a string")]
Flag = Annotated[bool, _is("true or false")]
Object = Annotated[dict, _is("an object")]
Items = Annotated[list, _is("a list")]
TextOrNull = Annotated[str | None, _is("a string or null")]
IntegerOrNull = Annotated[int | None, _is("an integer or null")]
NumberOrNull = Annotated[int | float | None, WithJsonSchema({"type": ["number", "null"]}), _is("a number or null")]
FlagOrNull = Annotated[bool | None, _is("true, false or null")]
ObjectOrNull = Annotated[dict | None, _is("an object or null")]
NumbersOrNull = Annotated[list[int | float] | None,
                          WithJsonSchema({"type": ["array", "null"], "items": {"type": "number"}}),
                          _is("a list of numbers or null")]
TextsOrNull = Annotated[list[str] | None, _is("a list of strings or null")]


class ResultsRecord(BaseModel):
    """results.json, key by key in the order written (docs/reference/run-format.md says what each holds): no
    other key, none missing, each of its type. ``as_json()`` is the file's object."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)  # built when first used

    format_version: Annotated[Integer, Field(json_schema_extra={"const": RESULTS_FORMAT_VERSION})] = \
        RESULTS_FORMAT_VERSION  # another version is never read as this one (record.OtherFormat)
    softeval_version: Text
    model: Text  # as given: preset, hub id or path
    model_kind: Text  # base or post-trained
    model_kind_source: Text  # preset, flag or guessed from name
    task: Text
    method: Text
    seed: Integer
    n: Count  # scored items
    series: TextOrNull  # a checkpoint of a series: its name and training step
    step: IntegerOrNull
    metrics: Object
    answers: Object  # the most frequent strict and gold answers
    format_failures: Object
    item_ids: Items
    split: Object
    chat_template: Flag  # whether the prompts went through the tokenizer's chat template
    engine: Object  # what generated the outputs
    truncated_prompts: Count
    unscorable: Count
    tuning: ObjectOrNull  # tuned runs only
    config: Object  # every option the run used
    versions: Object
    git: TextOrNull
    started_at: Text
    finished_at: Text
    wall_seconds: Number
    samples_count: Count  # samples.jsonl's rows
    samples_sha256: Text  # and the sha256 of its bytes

    def as_json(self) -> dict[str, Any]:
        """The record as results.json holds it: a dict in the order of the keys (the values as given)."""
        return {name: getattr(self, name) for name in type(self).model_fields}


RESULTS_KEYS = tuple(ResultsRecord.model_fields)


class SampleRow(BaseModel):
    """One row of samples.jsonl, a scored item (docs/reference/run-format.md, "samples.jsonl"). Required: what
    every reader computes the metrics and top answers from; the rest as the run writes it where the task has it
    (rows of an older softeval lack ``failure`` and ``prompt``), and a task source's own keys beside them."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True, defer_build=True)

    id: TextOrNull = None  # the item's id (item_ids in results.json, in order)
    prompt: TextOrNull = None
    output: TextOrNull = None
    strict: TextOrNull  # the strict answer: None when the output did not follow the format
    lenient: TextOrNull = None
    gold: Text
    format_ok: Flag
    correct: Flag
    lenient_correct: Flag
    unscorable: FlagOrNull = None  # true where the matcher ran past its time limit
    lm_eval: ObjectOrNull = None  # an lm-eval task: each filter's answer and the task's own metrics on it
    f1: NumberOrNull = None
    hit_max_new_tokens: FlagOrNull = None  # null: not recorded
    failure: TextOrNull = None  # why the output failed the format (softeval.diagnosis)
    letter_loglik_pred: TextOrNull = None  # multiple choice
    letter_loglik_correct: FlagOrNull = None
    cloze_scores: NumbersOrNull = None  # multiple choice and BoolQ
    cloze_pred: TextOrNull = None
    cloze_correct: FlagOrNull = None
    cloze_norm_pred: TextOrNull = None
    cloze_norm_correct: FlagOrNull = None
    permutation_picks: TextsOrNull = None  # --permutations: original letters, the original order first
    permutation_consistent: FlagOrNull = None
    circular_correct: FlagOrNull = None


class CurveRow(BaseModel):
    """One row of curve.jsonl, a logged tuning step: its training loss, and at a curve point what the held-out
    slice scored (null on the other rows); ``held_out_loss`` with early stop on."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True, defer_build=True)

    step: Number
    loss: NumberOrNull = None
    format_rate: NumberOrNull = None
    accuracy: NumberOrNull = None
    held_out_loss: NumberOrNull = None


def _errors(model: type[BaseModel], data: Any) -> list[dict] | None:
    """pydantic's errors of ``data`` read as ``model`` (None: it is one)."""
    try:
        model.model_validate(data)
    except ValidationError as err:
        return err.errors(include_url=False, include_input=False)
    return None


def _worded(errors: list[dict], subject: str, its: str) -> str:
    """The first mistake pydantic found, in one line: the keys missing (``results.json lacks a, b``), else the keys
    no such record has, else the first value of another type than its key's (in the order of the keys).
    ``subject`` and ``its`` name the file or row: ``results.json``, or ``it`` and ``its``."""
    missing = [e["loc"][0] for e in errors if e["type"] == "missing"]
    if missing:
        return f"{subject} lacks {', '.join(missing)}"
    unknown = [e["loc"][0] for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        return (f"{subject} has {', '.join(map(shown, unknown))}, which no {RESULTS_FILE} of format_version "
                f"{RESULTS_FORMAT_VERSION} has")
    error = errors[0]
    where = f"{its} {error['loc'][0]!r}"
    if error["type"] == "said":
        return error["ctx"]["template"].format(key=where)
    return f"{where}: {error['msg']}"  # not reached while every key says what it refuses


def check_results(results: dict[str, Any]) -> None:
    """RunFormatError, in one line, when a parsed results.json of this format version is not a ``ResultsRecord``:
    a key missing or unknown, a value of another type (a format_version that is not an integer among them)."""
    errors = _errors(ResultsRecord, results)
    if errors:
        raise RunFormatError(_worded(errors, RESULTS_FILE, RESULTS_FILE))


def sample_problem(row: dict[str, Any]) -> str | None:
    """Why a parsed samples.jsonl row (an object) is not a ``SampleRow`` (``it lacks correct``, ``its 'gold' is
    not a string``), or None."""
    errors = _errors(SampleRow, row)
    return _worded(errors, "it", "its") if errors else None


def curve_problem(row: dict[str, Any]) -> str | None:
    """Why a parsed curve.jsonl row (an object) is not a ``CurveRow``, or None."""
    errors = _errors(CurveRow, row)
    return _worded(errors, "it", "its") if errors else None


def results_schema() -> dict[str, Any]:
    """results.json's JSON Schema (`softeval schema results`): every key required, as every reader requires it."""
    schema = json_schema(ResultsRecord, f"softeval {RESULTS_FILE}",
                         f"A finished run's {RESULTS_FILE}, format_version {RESULTS_FORMAT_VERSION} "
                         "(docs/reference/run-format.md)")
    return {**schema, "required": list(RESULTS_KEYS)}


def samples_schema() -> dict[str, Any]:
    """One samples.jsonl row's JSON Schema (`softeval schema samples`)."""
    return json_schema(SampleRow, f"softeval {SAMPLES_FILE} row",
                       f"One line of a finished run's {SAMPLES_FILE}: a scored item (docs/reference/run-format.md)")


def curve_schema() -> dict[str, Any]:
    """One curve.jsonl row's JSON Schema (`softeval schema curve`)."""
    return json_schema(CurveRow, f"softeval {CURVE_FILE} row",
                       f"One line of a tuned run's {CURVE_FILE}: a logged tuning step (docs/reference/run-format.md)")
