"""Storage faults met by a whole command: a disk that fills up mid-run, a read-only runs folder, a model
file cut short. Each is one line and exit 2, nothing is damaged, and a full disk's run resumes."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
from pathlib import Path

import pytest
from runfactory import write_run
from tiny import tiny_lm, tiny_model, tiny_tokenizer

from softeval import cli
from softeval.run import pipeline, validate
from softeval.store import index

ARGS = ["run", "--model", "tiny-0", "--task", "toyformat", "--method", "soft-prompt", "--limit", "4",
        "--steps", "2", "--tokens", "2", "--lr", "0.1", "--curve-every", "2", "--curve-items", "2",
        "--eval-batch-size", "3"]


def one_error(err: str) -> str:
    """The one line printed: an error message, never wrapped."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def error_line(err: str) -> str:
    """The one error line a run ends with (after its progress lines), no traceback."""
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert [line for line in lines if line.startswith("error: ")] == lines[-1:], err
    return lines[-1]


REAL_OPEN = Path.open


class FullDisk:
    """Every file written through ``Path.open`` under ``root`` shares ``free`` bytes; the write that does
    not fit writes what fits and fails with ENOSPC, as a full filesystem does. ``free=None``: no limit,
    only ``writes`` (file name, bytes) recorded."""

    def __init__(self, root: Path, free: int | None):
        self.root, self.free, self.writes, self.failed = root, free, [], None

    def install(self, monkeypatch) -> None:
        def open_(path, mode="r", *args, **kwargs):
            handle = REAL_OPEN(path, mode, *args, **kwargs)
            inside = Path(os.path.abspath(path)).is_relative_to(self.root)
            return _Metered(handle, self, Path(path).name) if inside and set(mode) & set("wax") else handle

        monkeypatch.setattr(Path, "open", open_)


class _Metered:
    def __init__(self, handle, disk: FullDisk, name: str):
        self.handle, self.disk, self.name = handle, disk, name

    def write(self, data):
        size = len(data.encode() if isinstance(data, str) else data)
        self.disk.writes.append((self.name, size))
        if self.disk.free is not None and size > self.disk.free:
            self.handle.write(data[:self.disk.free])
            self.disk.free, self.disk.failed = 0, self.name
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if self.disk.free is not None:
            self.disk.free -= size
        return self.handle.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self.handle.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self.handle, name)


@pytest.fixture
def tiny_run(toy, monkeypatch):
    monkeypatch.setattr(pipeline, "load_model", lambda name, **kw: tiny_lm())
    monkeypatch.setattr(validate, "check_model_name", lambda name: None)  # 'tiny-0': no preset, folder or id
    monkeypatch.setattr(pipeline, "SAVE_EVERY", 2)  # two scoring chunks: outputs.jsonl is appended twice


def _files(run: Path) -> dict:
    results = json.loads((run / "results.json").read_text())
    for key in ("started_at", "finished_at", "wall_seconds", "git", "config"):
        results.pop(key)
    results["tuning"].pop("seconds")
    results["tuning"].pop("resumed_at_steps")
    return {"results": results, "samples": (run / "samples.jsonl").read_bytes(),
            "curve": (run / "curve.jsonl").read_bytes(),
            "soft_prompt": (run / "soft_prompt" / "adapter_model.safetensors").read_bytes()}


@pytest.mark.slow  # seven tiny runs: 11-14 s here
def test_a_disk_that_fills_up_at_any_write_is_one_line_and_a_rerun_completes(tiny_run, tmp_path, capsys,
                                                                             monkeypatch):
    """The disk fills up in the tuning checkpoint, the scoring outputs or samples.jsonl: one line naming
    the run folder and the space left, exit 2 (it was a traceback: SafetensorError from the checkpoint,
    OSError from the outputs); the same command after freeing space finishes with the results of a run
    that never hit a full disk."""
    clean = FullDisk(tmp_path / "clean", None)
    clean.install(monkeypatch)
    assert cli.main([*ARGS, "--out", str(clean.root)]) == 0
    run = "tiny-0/toyformat/soft-prompt/seed0"
    reference = _files(clean.root / run)
    order = []  # each file's first write, and the bytes written before it
    for i, (name, _) in enumerate(clean.writes):
        if name not in (n for n, _ in order):
            order.append((name, sum(size for _, size in clean.writes[:i])))
    names = [name for name, _ in order]
    points = ("tune_state-2.safetensors.tmp", "outputs.jsonl", "samples.jsonl.tmp")  # the soft prompt's
    # adapter_model.safetensors is written as the checkpoint's tensors are
    assert set(points) <= set(names), names
    capsys.readouterr()
    for k, (name, before) in enumerate(order):
        if name not in points:
            continue
        out = tmp_path / f"full{k}"
        disk = FullDisk(out, before + 5)  # the disk is full 5 bytes into this file
        disk.install(monkeypatch)
        assert cli.main([*ARGS, "--out", str(out)]) == 2, name
        line = error_line(capsys.readouterr().err)
        assert disk.failed == name
        assert line.startswith(f"error: no space left on the device: could not write the run files in "
                               f"{out / run}.partial ("), line
        assert " free of " in line and f"on the filesystem of {out}). " in line, line
        assert line.endswith(f"Free some space there and run the same command again: it resumes from what "
                             f"{out / run}.partial holds"), line
        assert not (out / run).exists()
        FullDisk(out, None).install(monkeypatch)  # space freed
        assert cli.main([*ARGS, "--out", str(out)]) == 0, capsys.readouterr().err
        assert _files(out / run) == reference, name
        assert not [p for p in out.rglob("*") if p.name.endswith((".partial", ".lock", ".tmp"))], name


@pytest.fixture
def read_only(monkeypatch):
    """``read_only(folder)``: the folder as on a read-only mount. Its modes lose every write bit (enough
    for a user other than root), and, for root too, Python's and SQLite's writable opens under it fail
    as the mount would have them fail: EROFS, and SQLite's 'unable to open database file'."""
    roots: list[Path] = []
    real_open, real_connect = os.open, sqlite3.connect

    def under(path) -> bool:
        return any(Path(os.path.abspath(os.fsdecode(path))).is_relative_to(r) for r in roots)

    def open_(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and under(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))
        return real_open(path, flags, *args, **kwargs)

    def connect(database, *args, uri=False, **kwargs):
        if not (uri and "mode=ro" in str(database)) and under(database):
            raise sqlite3.OperationalError("unable to open database file")
        return real_connect(database, *args, uri=uri, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(index.sqlite3, "connect", connect)

    def make(folder: Path) -> None:
        for path in [folder, *folder.rglob("*")]:
            path.chmod(path.stat().st_mode & ~0o222)
        roots.append(folder.absolute())

    yield make
    for root in roots:
        for path in [root, *root.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else None)
            for p in [folder, *folder.rglob("*")]}


def test_a_read_only_runs_folder_is_listed_and_writing_there_says_read_only(read_only, tmp_path, capsys):
    """An archive or a read-only mount: `softeval runs` lists it from its index opened read-only (it was
    'the runs index ... is damaged (unable to open database file)'), or from the run folders when it
    has no index; --rebuild says why it cannot; the write check says 'read-only file system' (it said
    'permission denied'), in a sweep naming the file's `out:` key."""
    indexed, bare = tmp_path / "archive", tmp_path / "bare"
    for root in (indexed, bare):
        write_run(root, "org/a", "mmlu", "zero-shot", [True, False, True, True])
        write_run(root, "org/b", "mmlu", "zero-shot", [False, False, True, True])
    expected = [(r["model"], r["accuracy"]) for r in index.list_runs(indexed)]
    assert expected == [("org/a", 0.75), ("org/b", 0.5)] and (indexed / "index.sqlite").exists()
    for root in (indexed, bare):
        read_only(root)
    before = {root: _snapshot(root) for root in (indexed, bare)}
    for root in (indexed, bare):
        assert cli.main(["runs", str(root), "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)
        assert [(r["model"], r["accuracy"]) for r in listed] == expected, root
    assert {root: _snapshot(root) for root in (indexed, bare)} == before  # nothing written, no index made

    assert cli.main(["runs", str(indexed), "--rebuild"]) == 2
    assert one_error(capsys.readouterr().err) == (
        f"error: cannot rebuild the runs index {indexed / 'index.sqlite'}: {indexed} is not writable "
        f"(read-only file system); `softeval runs {indexed}` lists its runs without writing")

    new = indexed / "more"
    assert cli.main(["run", "--model", "org/model", "--task", "mmlu", "--out", str(new)]) == 2
    assert one_error(capsys.readouterr().err) == (
        f"error: --out {new}: cannot write under {indexed} (read-only file system)")
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(f"out: {new}\nmodels: [gemma-3-270m]\ntasks: [mmlu]\n")
    assert cli.main(["sweep", str(sweep_file)]) == 2
    assert one_error(capsys.readouterr().err) == (
        f"error: out: {new}: cannot write under {indexed} (read-only file system)")
    assert {root: _snapshot(root) for root in (indexed, bare)} == before


def test_a_model_whose_weights_file_was_cut_short_is_one_line(toy, tmp_path, capsys):
    """`softeval run --model DIR` with model.safetensors cut in half (an interrupted copy): one line
    naming the model and the fix, exit 2, as for a broken config.json (it was a SafetensorError
    traceback, exit 1); no run folder is left."""
    folder = tmp_path / "model"
    tiny_model(len(tiny_tokenizer()), seed=0).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:weights.stat().st_size // 2])
    out = tmp_path / "out"
    assert cli.main(["run", "--model", str(folder), "--task", "toyformat", "--out", str(out),
                     "--device", "cpu"]) == 2
    line = error_line(capsys.readouterr().err)
    assert line.startswith(f"error: could not load model {str(folder)!r}: a weights file is damaged or "
                           "incomplete (Error while deserializing header: "), line
    assert line.endswith("); copy or download the model again"), line
    assert not list(out.rglob("seed0*"))  # no run folder, finished or partial
