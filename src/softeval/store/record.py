"""results.json's format version, and the errors a reader raises for a run whose files cannot be used.

The record itself, every key results.json holds in the order written and its type, is declared in
``softeval.store.schema`` (``ResultsRecord``, with samples.jsonl's and curve.jsonl's rows), a pydantic model
imported when a reader first checks a file; this module stays light, so that `softeval --help` imports no
pydantic. A results.json of another format version is never read as this one (``OtherFormat``, told by
``check_version`` before the record is checked); one that is not a ``ResultsRecord`` is a ``RunFormatError``
(damage). docs/reference/run-format.md describes each key (a test holds the page and the record together).
"""

from __future__ import annotations

from typing import Any

from softeval.checks import is_whole
from softeval.errors import shown
from softeval.version import __version__

# In a finished run folder (softeval.store.format names the rest).
RESULTS_FILE = "results.json"
SAMPLES_FILE = "samples.jsonl"
CURVE_FILE = "curve.jsonl"  # soft-prompt and lora runs: the learning curve
# results.json's format. A change of its keys, their types or their meaning is a new version: this
# softeval then refuses the runs of the other one (OtherFormat), and nothing migrates them.
RESULTS_FORMAT_VERSION = 1


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


def check_version(results: dict[str, Any]) -> None:
    """Raise OtherFormat when a parsed results.json is of another format version (or of none). A format_version
    that is not an integer is not another format: the record's check names it as damage."""
    found = results.get("format_version")
    if found != RESULTS_FORMAT_VERSION and (found is None or is_whole(found)):
        raise OtherFormat(found, results.get("softeval_version"))
