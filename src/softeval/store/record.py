"""The record of results.json: every key a finished run's results.json holds, in the order it is written,
with its type, and the format version it is written in.

The run fills it (``softeval.run.pipeline``), ``softeval.store.format.load_results`` checks every
results.json it reads against it, and docs/reference/run-format.md describes each key (a test holds the three
together). A results.json of another format version is never read as this one (``OtherFormat``); one
that is not a ``Results`` is a ``RunFormatError`` (damage).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import UnionType
from typing import Any, get_args, get_type_hints

from softeval.checks import is_number, is_whole
from softeval.errors import shown
from softeval.version import __version__

RESULTS_FILE = "results.json"
# results.json's format. A change of its keys, their types or their meaning is a new version: this
# softeval then refuses the runs of the other one (OtherFormat), and nothing migrates them.
RESULTS_FORMAT_VERSION = 1

COUNT = {"is": "a count of items"}  # an int that is not negative


@dataclass(frozen=True, kw_only=True)
class Results:
    """results.json, key by key in the order written (docs/reference/run-format.md says what each holds)."""

    format_version: int = RESULTS_FORMAT_VERSION
    softeval_version: str
    model: str  # as given: preset, hub id or path
    model_kind: str  # base or post-trained
    model_kind_source: str  # preset, flag or guessed from name
    task: str
    method: str
    seed: int
    n: int = field(metadata=COUNT)  # scored items
    series: str | None  # a checkpoint of a series: its name and training step
    step: int | None
    metrics: dict
    answers: dict  # the most frequent strict and gold answers
    format_failures: dict
    item_ids: list
    split: dict
    chat_template: bool  # whether the prompts went through the tokenizer's chat template
    engine: dict  # what generated the outputs
    truncated_prompts: int = field(metadata=COUNT)
    unscorable: int = field(metadata=COUNT)
    tuning: dict | None  # soft-prompt runs only
    config: dict  # every option the run used
    versions: dict
    git: str | None
    started_at: str
    finished_at: str
    wall_seconds: float
    samples_count: int = field(metadata=COUNT)  # samples.jsonl's rows
    samples_sha256: str  # and the sha256 of its bytes

    def as_json(self) -> dict[str, Any]:
        """The record as results.json holds it: a dict in the order of the fields (values not copied)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


KEYS = tuple(f.name for f in fields(Results))
_TYPES = get_type_hints(Results)
_SAID = {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "an object",
         list: "a list", type(None): "null"}


def _options(name: str) -> tuple[type, ...]:
    hint = _TYPES[name]
    return get_args(hint) if isinstance(hint, UnionType) else (hint,)


def _fits(kind: type, value: Any) -> bool:
    if kind is int:
        return is_whole(value)
    if kind is float:
        return is_number(value)
    if kind is type(None):
        return value is None
    return isinstance(value, kind)


class RunFormatError(ValueError):
    """A folder that looks like a run but whose results.json cannot be used; the message says why."""


class OtherFormat(RunFormatError):
    """A results.json of another format version, or of none (written before softeval recorded one).
    Not damage, and never read as this version. ``about(where)``: which version the file at ``where``
    has and which this softeval reads; ``use``: the softeval that wrote it, when another ('' when not)."""

    def __init__(self, found: Any, wrote: Any):
        self.found = found
        self.use = f"softeval {wrote}" if isinstance(wrote, str) and wrote != __version__ else ""
        super().__init__(f"{self.about(RESULTS_FILE)}: rerun it with `softeval run`, its options and --force"
                         + (f", or read it with {self.use}" if self.use else ""))

    def about(self, where: object) -> str:
        said = "no format_version, so was written before softeval recorded one" if self.found is None \
            else f"format_version {shown(self.found)}"
        return f"{where} has {said}; this softeval reads format_version {RESULTS_FORMAT_VERSION}"


def check(results: dict[str, Any]) -> None:
    """Raise OtherFormat when a parsed results.json is of another format version (or of none), else
    RunFormatError, in one line, when it is not a ``Results``: a key missing or unknown, a value of
    the wrong type (a format_version that is not an integer among them: damage, not another format)."""
    found = results.get("format_version")
    if found != RESULTS_FORMAT_VERSION and (found is None or is_whole(found)):
        raise OtherFormat(found, results.get("softeval_version"))
    missing = [key for key in KEYS if key not in results]
    if missing:
        raise RunFormatError(f"{RESULTS_FILE} lacks {', '.join(missing)}")
    unknown = [key for key in results if key not in _TYPES]
    if unknown:
        raise RunFormatError(f"{RESULTS_FILE} has {', '.join(map(shown, unknown))}, which no results.json of "
                             f"format_version {RESULTS_FORMAT_VERSION} has")
    for f in fields(Results):
        value, kinds = results[f.name], _options(f.name)
        count = "is" in f.metadata
        if not any(_fits(kind, value) for kind in kinds) or (count and value < 0):
            said = f.metadata["is"] if count else " or ".join(_SAID[kind] for kind in kinds)
            raise RunFormatError(f"{RESULTS_FILE} {f.name!r} is not {said}")
