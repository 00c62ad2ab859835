"""Post-trained scores from elsewhere (`softeval compare --post-scores FILE`): the post-trained side of the
ranking read from a leaderboard's or a model card's numbers instead of run folders.

The file is CSV (a header row) or JSON (a list of objects), one row per (model, task): ``model`` (the
post-trained model, as named on the POST side of a ``--pair BASE=POST``), ``task`` (a task name as the
runs have it), ``score`` (a fraction in [0, 1]) and optionally ``n`` (the number of items the score is
over; with it the bootstrap draws the post-trained score too, binomially). Other columns are ignored.
A score above 1 is refused, not divided: a file in percent says so in one line and is fixed by the user,
since 0.9 could be either. Every refusal is one line naming the file, the row and the fix.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from softeval.errors import UserError, shown
from softeval.methods import REFERENCE, with_role
from softeval.tasks.data import file_problem

REQUIRED = ("model", "task", "score")
OPTIONAL = ("n",)


@dataclass(frozen=True)
class PostScore:
    """One row of a post-scores file."""

    model: str
    task: str
    score: float
    n: int | None = None


@dataclass(frozen=True)
class PostScores:
    """A post-scores file, read: its path (how every output names the source) and its rows by (model, task)."""

    path: str
    rows: dict[tuple[str, str], PostScore]

    @property
    def models(self) -> set[str]:
        return {model for model, _ in self.rows}

    def get(self, model: str, task: str) -> PostScore | None:
        return self.rows.get((model, task))

    @property
    def note(self) -> str:
        return (f"post-trained scores from {self.path}, not from runs: the intervals draw them binomially where the "
                "file gives n, else hold them fixed")


def read_post_scores(path: str | Path) -> PostScores:
    """Read and check a post-scores file (CSV, or JSON by its ``.json`` suffix or a first ``[``); a
    UserError naming the file, the row and the fix for anything else. Anything but a regular file (a folder, a
    named pipe, a device) is refused before it is opened, by the rule task data follows (``file_problem``)."""
    path = Path(path)
    problem = file_problem(path)  # never opened unless a regular file: a named pipe would block the read
    if problem == "not found":
        raise UserError(f"--post-scores {path}: no such file")
    if problem is not None:
        raise UserError(f"--post-scores {path} {problem}: give a CSV or JSON file of model, task, score")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise UserError(f"--post-scores {path}: no such file") from None
    except UnicodeDecodeError:
        raise UserError(f"--post-scores {path} is not UTF-8 text: save it as UTF-8 CSV or JSON") from None
    except OSError as err:
        raise UserError(f"--post-scores {path}: cannot read it ({err.strerror or err})") from None
    return parse_post_scores(text, str(path), as_json=path.suffix.lower() == ".json" or text.lstrip()[:1] == "[")


def parse_post_scores(text: str, name: str, as_json: bool = False) -> PostScores:
    """The rows of a post-scores file's ``text`` (``name``: the file, for the messages)."""
    where = f"--post-scores {name}"
    records = _json_records(text, where) if as_json else _csv_records(text, where)
    if not records:
        raise UserError(f"{where} has no rows: give one row per post-trained model and task "
                        f"({', '.join(REQUIRED)}, optionally n)")
    rows: dict[tuple[str, str], PostScore] = {}
    first_row: dict[tuple[str, str], int] = {}
    for row_no, record in records:
        found = _row(record, f"{where} row {row_no}")
        key = (found.model, found.task)
        if key in rows:
            raise UserError(f"{where} rows {first_row[key]} and {row_no} are both model {shown(found.model)} on task "
                            f"{shown(found.task)}: keep one score per model and task")
        rows[key], first_row[key] = found, row_no
    return PostScores(name, rows)


def _csv_records(text: str, where: str) -> list[tuple[int, dict]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [h.strip() for h in reader.fieldnames or []]
    _check_columns(header, where, "header")
    records = []
    try:
        for record in reader:
            if None in record:
                raise UserError(f"{where} row {reader.line_num - 1} has more cells than the header has columns")
            if all((v or "").strip() == "" for v in record.values()):
                continue  # a blank line
            records.append((reader.line_num - 1, {(k or "").strip(): v for k, v in record.items()}))
    except csv.Error as err:
        raise UserError(f"{where} is not CSV ({err}, near line {reader.line_num})") from None
    return records


def _json_records(text: str, where: str) -> list[tuple[int, dict]]:
    try:
        data = json.loads(text)
    except ValueError as err:
        raise UserError(f"{where} is not JSON ({str(err).splitlines()[0]})") from None
    if not isinstance(data, list):
        raise UserError(f"{where}: the JSON must be a list of objects with {', '.join(REQUIRED)} (and optionally "
                        f"n), not {type(data).__name__}")
    records = []
    for row_no, record in enumerate(data, 1):
        if not isinstance(record, dict):
            raise UserError(f"{where} row {row_no} is {type(record).__name__} {shown(record)}, not an object with "
                            f"{', '.join(REQUIRED)}")
        _check_columns(list(record), f"{where} row {row_no}", "object")
        records.append((row_no, record))
    return records


def _check_columns(names: list[str], where: str, what: str) -> None:
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise UserError(f"{where}: the {what} lacks {', '.join(missing)} (it has {', '.join(map(str, names)) or 'none'}"
                        f"); give columns {', '.join(REQUIRED)} and optionally n")


def _row(record: dict, where: str) -> PostScore:
    model, task = (_text(record.get(key), key, where) for key in ("model", "task"))
    score = _number(record.get("score"), "score", where)
    if not 0 <= score <= 1:
        hint = f" (in percent? give {score / 100:g})" if 1 < score <= 100 else ""
        raise UserError(f"{where}: score {shown(record.get('score'))} is outside [0, 1]{hint}: give scores as "
                        "fractions")
    n = record.get("n")
    if n is None or (isinstance(n, str) and not n.strip()):
        return PostScore(model, task, score)
    count = _number(n, "n", where)
    if count != int(count) or count < 1:
        raise UserError(f"{where}: n {shown(n)} is not a whole number of items >= 1 (leave it empty when unknown)")
    return PostScore(model, task, score, int(count))


def _text(value, key: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: {key} {shown(value)} is empty or not text: name the {key}")
    return value.strip()


def _number(value, key: str, where: str) -> float:
    if isinstance(value, bool):
        number = math.nan
    elif isinstance(value, (int, float)):
        number = float(value)
    else:
        try:
            number = float(str(value).strip())
        except ValueError:
            number = math.nan
            if str(value).strip().endswith("%"):
                raise UserError(f"{where}: {key} {shown(value)} is in percent: give it as a fraction in [0, 1]") \
                    from None
    if not math.isfinite(number):
        raise UserError(f"{where}: {key} {shown(value)} is not a number")
    return number


def check_pairs(pairs: list[tuple[str, str]], post_method: str, post_scores: PostScores) -> None:
    """Every POST of a ``--pair BASE=POST`` has rows in the file, every model of the file is the POST of a
    pair, and no ``--post-method`` (which picks runs) other than the default (the REFERENCE method) is given beside
    the file."""
    where = f"--post-scores {post_scores.path}"
    if post_method not in with_role(REFERENCE):
        raise UserError(f"--post-method {post_method} picks how runs of the post-trained models are scored; with "
                        f"{where} their scores come from the file: leave --post-method out")
    for base, post in pairs:
        if post not in post_scores.models:
            raise UserError(f"--pair {base}={post}: {where} has no row for model {shown(post)} (it has "
                            f"{', '.join(sorted(post_scores.models))})")
    for model in sorted(post_scores.models - {post for _, post in pairs}):
        raise UserError(f"{where}: model {shown(model)} matches no base model: add --pair BASE={model}, or remove "
                        "its rows")


def boot_post_scores(rows: list[PostScore], n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, len(rows)) bootstrap replicates of the filed scores: binomial draws over a row's n items
    where the file gives n (its own sampling noise), the score itself where it does not."""
    columns = [rng.binomial(row.n, row.score, n_boot) / row.n if row.n else np.full(n_boot, row.score)
               for row in rows]
    return np.stack(columns, axis=1)
