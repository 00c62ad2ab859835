"""The runs index: a SQLite table over every finished run folder.

The run folders are the source of truth (docs/reference/run-format.md; read by softeval.store.format); the index
at `<out>/index.sqlite` is a derived convenience so `softeval runs` can list thousands of runs without
opening every folder. It can always be rebuilt from the folders. Beside the runs it remembers each folder a
listing skipped, with the reason, so that every listing names it without reading it again (``skipped``).
Writers are separate processes
(parallel runs finishing at the same moment), so the database is in WAL mode, every write is one short
`BEGIN IMMEDIATE` transaction keyed by the run's path, and a busy timeout makes a second writer wait
instead of failing.
"""

from __future__ import annotations

import json
import os
import shlex
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from softeval.constants import ADAPTER_WEIGHTS
from softeval.errors import UserError, shown
from softeval.metrics import METRICS, top_answer
from softeval.store.format import (
    INDEX_FILE,
    RESULTS_FILE,
    SAMPLES_FILE,
    Run,
    RunFormatError,
    ScanReport,
    candidates,
    check_run,
    scan,
    trained_folders,
    write_refusal,
)
from softeval.store.record import RESULTS_FORMAT_VERSION
from softeval.version import __version__

BUSY_TIMEOUT_S = 60.0
# The index's format (its schema and what its columns hold), kept in the database header (SQLite's
# user_version; 0 in an index written before softeval recorded one). A change of either is a new version.
# 2: the skipped table.
INDEX_FORMAT_VERSION = 2

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS runs (
    path TEXT PRIMARY KEY,          -- run folder relative to the output root, '/'-separated
    model TEXT NOT NULL,
    model_kind TEXT,
    task TEXT NOT NULL,
    method TEXT NOT NULL,
    seed INTEGER NOT NULL,
    n INTEGER,
    {", ".join(f"{m} REAL" for m in METRICS)},
    metrics_json TEXT NOT NULL,     -- the full metrics object, intervals included
    top_answer TEXT,                -- most frequent strict answer and its share, e.g. 'B 46/50'
    model_kind_source TEXT,         -- where model_kind came from: preset, flag, guessed from name
    stamp TEXT,                     -- size and mtime of results.json and samples.jsonl when indexed
    series TEXT,                    -- the training run this model is a checkpoint of (softeval.sweep.series)
    step INTEGER,                   -- the checkpoint's training step
    finished_at TEXT,
    indexed_at TEXT NOT NULL,
    format_version INTEGER NOT NULL -- the run's results.json format_version (softeval.store.record)
);
CREATE TABLE IF NOT EXISTS skipped (
    path TEXT PRIMARY KEY,          -- a run folder a listing skipped, relative to the output root, '/'-separated
    reason TEXT NOT NULL,           -- why, as the listing named it
    stamp TEXT NOT NULL,            -- the folder's and its files' size and mtime when checked (_folder_stamp)
    checked_by TEXT NOT NULL        -- the softeval version that checked it: another one checks it again
)
"""


@dataclass
class RebuildReport(ScanReport):
    """What a rebuild found (the runs it indexed, every folder it skipped, with the reason), and where
    it moved a damaged index file."""

    damaged_aside: Path | None = None  # where a damaged index file was moved by rebuild()

    @property
    def indexed(self) -> list[Path]:
        return [run.path for run in self.runs]


class IndexDamaged(UserError):
    """The index file is not a usable SQLite database; the message says how to rebuild it."""


class IndexOtherVersion(IndexDamaged):
    """An index of another format version (``found``; 0: of none), never read as this one; the message
    names both versions and the command that rebuilds it from the run folders."""

    def __init__(self, out_root: Path, found: int):
        self.found = found
        said = "no format_version, so was written before softeval recorded one" if found == 0 \
            else f"format_version {shown(found)}"
        wrote = "use the softeval that wrote it, or " if found > INDEX_FORMAT_VERSION else ""
        super().__init__(f"the runs index {out_root / INDEX_FILE} has {said}; this softeval ({__version__}) "
                         f"reads format_version {INDEX_FORMAT_VERSION}: {wrote}rebuild it from the run "
                         f"folders with `{rebuild_command(out_root)}`")


def connect(out_root: Path, any_version: bool = False) -> sqlite3.Connection:
    """Open (creating if needed) the index in WAL mode with a busy timeout, schema in place.
    A file that is not a database raises IndexDamaged naming the command that rebuilds it, an index of
    another format version IndexOtherVersion, unless ``any_version`` (``rebuild``, which replaces it)."""
    out_root = Path(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(out_root / INDEX_FILE, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as exc:  # cannot even be opened (a folder in its place, say)
        raise _damaged(out_root, exc) from None
    conn.row_factory = sqlite3.Row
    # Switching to WAL takes an exclusive lock; two brand-new writers can race on it, so retry.
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            if not any_version:
                _schema(conn, out_root)
            return conn
        except IndexOtherVersion:
            conn.close()
            raise
        except sqlite3.DatabaseError as exc:
            busy = isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)
            if not busy or time.monotonic() > deadline:
                conn.close()
                if busy:
                    raise
                raise _damaged(out_root, exc) from None
            time.sleep(0.05)


def _damaged(out_root: Path, exc: Exception) -> IndexDamaged:
    return IndexDamaged(f"the runs index {out_root / INDEX_FILE} is damaged ({exc}); the run folders are "
                        f"intact: rebuild it from them with `{rebuild_command(out_root)}`")


def rebuild_command(out_root: Path) -> str:
    return f"softeval runs {shlex.quote(str(out_root))} --rebuild"


def _version(conn: sqlite3.Connection) -> tuple[int, bool]:
    """The index's format version and whether it holds the runs table (0 and False: a new database)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    return version, conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs'").fetchone() is not None


def _schema(conn: sqlite3.Connection, out_root: Path) -> None:
    """A new database gets this version's schema (in one transaction: a second process doing the same
    waits, then finds it there); one of another format version is IndexOtherVersion."""
    if _version(conn)[0] == INDEX_FORMAT_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        version, has_table = _version(conn)
        if version != INDEX_FORMAT_VERSION:
            if version != 0 or has_table:
                raise IndexOtherVersion(out_root, version)
            _create(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _create(conn: sqlite3.Connection) -> None:
    """This version's empty table, in place of what was there (inside the caller's transaction)."""
    conn.execute("DROP TABLE IF EXISTS runs")
    conn.execute("DROP TABLE IF EXISTS skipped")
    for statement in _SCHEMA.split(";"):
        conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {INDEX_FORMAT_VERSION}")


@contextmanager
def _writing(out_root: Path, any_version: bool = False):
    """One write transaction, taken at once (BEGIN IMMEDIATE) so concurrent writers queue on the
    busy timeout instead of failing halfway; rolled back on any error."""
    conn = connect(out_root, any_version)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()


def record_run(out_root: Path, run_dir: Path) -> None:
    """Add or replace one finished run in the index; called by the run writer after the rename."""
    run = check_run(Path(out_root), Path(run_dir))
    with _writing(out_root) as conn:
        _upsert(conn, run)


def rebuild(out_root: Path) -> RebuildReport:
    """Replace the index's contents (and its schema, of this format version) with what the folders
    hold, in one transaction. A damaged index file is first moved aside (``index.sqlite.damaged-<time>``,
    kept for inspection); one of another format version is replaced (derived data: nothing is lost)."""
    out_root = Path(out_root)
    why = write_refusal(out_root) if out_root.is_dir() else None
    if why:
        raise UserError(f"cannot rebuild the runs index {out_root / INDEX_FILE}: {out_root} is not writable "
                        f"({why}); `softeval runs {shlex.quote(str(out_root))}` lists its runs without writing")
    # each folder's stamp taken before its check, so a folder changed meanwhile is checked again next time
    stamps = {path: _folder_stamp(path) for path, why in candidates(out_root) if why is None}
    found = scan(out_root)
    report = RebuildReport(found.runs, found.skipped)
    try:
        connect(out_root, any_version=True).close()
    except IndexDamaged:
        report.damaged_aside = _move_aside(out_root)
    with _writing(out_root, any_version=True) as conn:
        _create(conn)
        for run in report.runs:
            _upsert(conn, run)
        for path, why in report.skipped:
            if path in stamps:
                _remember(conn, _rel(out_root, path), why, stamps[path])
    return report


def _move_aside(out_root: Path) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    aside = out_root / f"{INDEX_FILE}.damaged-{stamp}"
    for suffix in ("", "-wal", "-shm"):
        path = Path(f"{out_root / INDEX_FILE}{suffix}")
        if path.exists():
            os.replace(path, Path(f"{aside}{suffix}"))
    return aside


def list_runs(out_root: Path, on_skip: Callable[[Path, str], None] | None = None) -> list[dict[str, Any]]:
    """Every finished run as a dict (metrics parsed), from the index; builds it first if there is none yet,
    or one of an older format version (``_current``). ``on_skip(path, why)`` is told of every folder left out,
    on every listing.

    The index may be stale: a run whose results.json or samples.jsonl changed since it was indexed
    (size or mtime) is checked again, and dropped when it no longer passes; a run whose folder is gone is
    dropped too. Every other folder a scan would look at (format.candidates: listed, not read) is named as
    skipped: a damaged one with the reason the index remembers for it (the ``skipped`` table), checked again
    only when it changed (``_folder_stamp``); a new one is checked, and listed (and indexed) when it is a
    finished run. Listing costs a listing of each folder and a stat per file, not a read.
    A folder this process cannot write (an archive, a read-only mount) is listed without writing: from
    its index opened read-only, or from its run folders when it has no usable index.
    """
    out_root = Path(out_root)
    if out_root.is_dir() and write_refusal(out_root):
        held = _read_only_index(out_root)
        if held is None:  # no usable index: the folders are the truth, read as a scan reads them
            found = scan(out_root)
            for path, why in found.skipped:
                if on_skip:
                    on_skip(path, why)
            return _sorted([_listed(out_root, _row(run)) for run in found.runs])
        return _listing(out_root, *held, on_skip, writable=False)
    conn = _current(out_root)
    if conn is None:
        rebuild(out_root)
        conn = connect(out_root)
    try:
        rows = [dict(row) for row in conn.execute(f"SELECT * FROM runs {_ORDER}")]
        remembered = {row["path"]: (row["reason"], row["stamp"], row["checked_by"])
                      for row in conn.execute("SELECT * FROM skipped")}
    finally:
        conn.close()
    return _listing(out_root, rows, remembered, on_skip, writable=True)


_ORDER = "ORDER BY task, model, method, seed"
Remembered = dict[str, tuple[str, str, str]]  # skipped folder (relative) -> (reason, stamp, checked_by)


def _current(out_root: Path) -> sqlite3.Connection | None:
    """The index, opened; None when there is none yet or it is of an older format version (or of none):
    the listing then rebuilds it from the folders. It is derived data, and every row it held comes back
    from the run folders that the rebuild reads, so nothing is lost and nothing of the old format is
    read. One of a newer version is not rebuilt (IndexOtherVersion is raised): it belongs to a newer
    softeval, which would rebuild it again in turn, and only --rebuild, asked for, replaces it."""
    if _unbuilt(out_root):
        return None
    try:
        return connect(out_root)
    except IndexOtherVersion as err:
        if err.found < INDEX_FORMAT_VERSION:
            return None
        raise


def _read_only_index(out_root: Path) -> tuple[list[dict[str, Any]], Remembered] | None:
    """The index's rows and remembered skips, opened read-only (``immutable``: SQLite then needs no -wal
    or -shm file beside it); None without a usable index (none, damaged, of another version)."""
    if _unbuilt(out_root):
        return None
    try:
        uri = f"{(out_root / INDEX_FILE).absolute().as_uri()}?mode=ro&immutable=1"
        with closing(sqlite3.connect(uri, uri=True)) as conn:
            conn.row_factory = sqlite3.Row
            if _version(conn)[0] != INDEX_FORMAT_VERSION:  # one of another version is never read
                return None
            rows = [dict(row) for row in conn.execute(f"SELECT * FROM runs {_ORDER}")]
            remembered = {row["path"]: (row["reason"], row["stamp"], row["checked_by"])
                          for row in conn.execute("SELECT * FROM skipped")}
            return rows, remembered
    except sqlite3.Error:
        return None  # damaged: it cannot be rebuilt here, the folders are the truth


def _listing(out_root: Path, rows: list[dict[str, Any]], remembered: Remembered, on_skip,
             writable: bool) -> list[dict[str, Any]]:
    """The runs as listed: the index's rows checked where stale (``_fresh``), every other folder a scan
    looks at named as skipped (``on_skip``) or, a finished run the index lacks, listed; where the folder
    is writable, the index told what changed."""
    runs, changed, dropped = _fresh(out_root, rows)
    listed = {item["path"] for item in runs}
    found: list[Run] = []
    skipped: list[tuple[Path, str]] = []
    checked: dict[str, tuple[str, str]] = {}  # relative path -> (reason, stamp): the skips to remember
    for path, why in candidates(out_root):
        if why is None:
            rel = _rel(out_root, path)
            if rel in listed:
                continue
            stamp = _folder_stamp(path)
            known = (*dropped[rel][1:], __version__) if rel in dropped else remembered.get(rel)
            judged = _judge(out_root, path, stamp, known)
            if isinstance(judged, Run):  # finished, but not in the index (a run that could not reach it, a copy)
                if judged.rel not in listed:
                    found.append(judged)
                    listed.add(judged.rel)
                continue
            why = judged
            checked[rel] = (why, stamp)
        skipped.append((path, why))
    # an indexed run dropped whose folder is no candidate any more (gone): named once, then forgotten
    skipped += [(path, why) for rel, (path, why, _) in dropped.items() if rel not in checked]
    if writable:
        _update(out_root, changed + found, dropped, checked, remembered)
    for path, why in skipped:
        if on_skip:
            on_skip(path, why)
    runs += [_listed(out_root, _row(run)) for run in found]
    return _sorted(runs) if found else runs


def _judge(out_root: Path, path: Path, stamp: str, known: tuple[str, str, str] | None) -> Run | str:
    """A folder the index does not list: why it is skipped, as remembered (``known``: reason, stamp, checked_by)
    where it has not changed since, else as its check says now; or the finished run it is."""
    if known is not None and known[1:] == (stamp, __version__):
        return known[0]
    try:
        return check_run(out_root, path)
    except RunFormatError as exc:
        return str(exc)


def _update(out_root: Path, upsert: list[Run], dropped: dict[str, tuple[Path, str, str]],
            checked: dict[str, tuple[str, str]], remembered: Remembered) -> None:
    """Tell the index what a listing found: runs checked again or found, runs dropped, and the skipped
    folders (those remembered no longer skipped forgotten); nothing is written when nothing changed."""
    remember = {rel: said for rel, said in checked.items()
                if remembered.get(rel) != (*said, __version__)}
    forget = [rel for rel in remembered if rel not in checked]
    if not (upsert or dropped or remember or forget):
        return
    with _writing(out_root) as conn:
        for run in upsert:
            _upsert(conn, run)
        for rel in dropped:
            conn.execute("DELETE FROM runs WHERE path = ?", (rel,))
        for rel, (why, stamp) in remember.items():
            _remember(conn, rel, why, stamp)
        for rel in forget:
            conn.execute("DELETE FROM skipped WHERE path = ?", (rel,))


def _fresh(out_root: Path, rows: list[dict[str, Any]]
           ) -> tuple[list[dict[str, Any]], list[Run], dict[str, tuple[Path, str, str]]]:
    """The rows as listed, the runs among them checked again (their files changed), and those dropped
    (relative path -> (folder, why, its stamp taken before the check))."""
    runs, changed, dropped = [], [], {}
    for item in rows:
        run_dir = out_root / item["path"]
        # a row of a run of another results format is checked again (and so dropped): never misread
        if item["stamp"] != _stamp(run_dir) or item["format_version"] != RESULTS_FORMAT_VERSION:
            stamp = _folder_stamp(run_dir)
            try:
                run = check_run(out_root, run_dir)
            except RunFormatError as exc:
                dropped[item["path"]] = (run_dir, str(exc), stamp)
                continue
            changed.append(run)
            item = {**item, **_row(run)}
        runs.append(_listed(out_root, item))
    return runs, changed, dropped


def _listed(out_root: Path, item: dict[str, Any]) -> dict[str, Any]:
    """An index row as a listing gives it: metrics parsed, the folder's path, no bookkeeping."""
    item = dict(item)
    item["metrics"] = json.loads(item.pop("metrics_json"))
    item["run_dir"] = str(out_root / item["path"])
    del item["stamp"], item["format_version"]
    return item


def _sorted(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(runs, key=lambda r: (r["task"], r["model"], r["method"], r["seed"]))


def _rel(out_root: Path, path: Path) -> str:
    """A folder found under ``out_root`` (by format.candidates), as the skipped table keys it."""
    return path.relative_to(out_root).as_posix()


def _remember(conn: sqlite3.Connection, rel: str, why: str, stamp: str) -> None:
    conn.execute("INSERT OR REPLACE INTO skipped (path, reason, stamp, checked_by) VALUES (?, ?, ?, ?)",
                 (rel, why, stamp, __version__))


def _unbuilt(out_root: Path) -> bool:
    """No index yet, or an empty file where it should be (a truncated index.sqlite is a valid empty
    database to SQLite, which would list no runs at all): built from the folders first."""
    try:
        return (out_root / INDEX_FILE).stat().st_size == 0
    except FileNotFoundError:
        return True


def _stamp(run_dir: Path) -> str | None:
    """Size and mtime of the two files a run's numbers come from (None when one is missing), and of a
    tuned run's trained part (each of format.trained_folders: '-' where there is none, so a deleted one makes the run
    checked again)."""
    try:
        parts = [os.stat(Path(run_dir) / name) for name in (RESULTS_FILE, SAMPLES_FILE)]
    except OSError:
        return None
    for folder in trained_folders():
        try:
            parts.append(os.stat(Path(run_dir) / folder / ADAPTER_WEIGHTS))
        except OSError:
            parts.append(None)
    return ";".join("-" if st is None else f"{st.st_size}:{st.st_mtime_ns}" for st in parts)


def _folder_stamp(run_dir: Path) -> str:
    """What a skipped folder's check reads, as stat gives it (size and mtime, '-' where missing): the folder
    itself (a file added, removed or renamed in it), its results.json and samples.jsonl, and each trained
    part's weights (format.trained_folders). Equal stamps: the check would say the same again."""
    paths = [run_dir, run_dir / RESULTS_FILE, run_dir / SAMPLES_FILE,
             *(run_dir / folder / ADAPTER_WEIGHTS for folder in trained_folders())]
    parts = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            parts.append("-")
            continue
        parts.append(f"{st.st_size}:{st.st_mtime_ns}")
    return ";".join(parts)


def _row(run: Run) -> dict[str, Any]:
    values = {m: (run.metric(m) or {}).get("value") for m in METRICS}
    r = run.results
    return {"path": run.rel, "model": run.model, "model_kind": run.model_kind, "task": run.task,
            "method": run.method, "seed": run.seed, "n": r.get("n"), **values,
            "metrics_json": json.dumps(r["metrics"]), "top_answer": top_answer(r),
            "model_kind_source": r.get("model_kind_source"), "series": run.series, "step": run.step,
            "stamp": _stamp(run.path),
            "finished_at": r.get("finished_at"),
            "indexed_at": datetime.now(UTC).isoformat(timespec="seconds"), "format_version": r["format_version"]}


def _upsert(conn: sqlite3.Connection, run: Run) -> None:
    row = _row(run)
    conn.execute(f"INSERT OR REPLACE INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                 tuple(row.values()))
