"""The one-time preparation of a packaged model (lm/presets.py) and `softeval prepare`: phases in order, the
cached folder written once and then read by every load, bad names refused before anything is prepared."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import pytest
from tiny import tiny_model, tiny_tokenizer

from softeval import cli
from softeval.errors import UserError
from softeval.lm import models, presets


@pytest.fixture
def fake_preset(tmp_path, monkeypatch):
    """A preset whose 'GGUF' reads as the tiny model (transformers' GGUF reader is not under test), in a
    cache of its own; returns the preset and the list of GGUF reads."""
    monkeypatch.setenv("SOFTEVAL_CACHE", str(tmp_path / "cache"))
    preset = dataclasses.replace(presets.PRESETS["smollm2-135m-instruct"], name="tiny-preset", tokenizer_fixes={})
    monkeypatch.setitem(presets.PRESETS, preset.name, preset)
    monkeypatch.setattr(presets, "preset_installed", lambda p: True)
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(presets, "preset_gguf_path", lambda p: gguf)
    reads = []

    def read(path):
        reads.append(path)
        tok = tiny_tokenizer()
        return tiny_model(len(tok)), tok

    monkeypatch.setattr(presets, "_read_gguf", read)
    return preset, reads


def test_prepare_reports_its_phases_writes_the_folder_once_and_loads_read_it(fake_preset):
    preset, reads = fake_preset
    phases = []
    seconds = presets.prepare(preset, phases.append)
    assert phases == [presets.JOIN, presets.READ, presets.WRITE] and list(seconds) == phases
    assert all(s >= 0 for s in seconds.values()) and len(reads) == 1
    assert presets.prepared(preset) and (presets.converted_path(preset) / presets.MODEL_CONFIG).is_file()
    assert presets.prepare(preset, phases.append) == {} and len(phases) == 3  # done: nothing again
    lm = models.load_model(preset.name, device="cpu")
    assert len(reads) == 1 and lm.source == str(presets.converted_path(preset))
    assert not list(presets.converted_path(preset).parent.glob("*.tmp*"))


def test_softeval_prepare_prepares_then_says_prepared(fake_preset, capsys):
    preset, reads = fake_preset
    assert cli.main(["prepare", preset.name]) == 0
    err = capsys.readouterr().err
    assert f"{preset.name}: prepared in" in err and presets.READ in err and len(reads) == 1
    assert cli.main(["prepare", preset.name, preset.name]) == 0
    assert f"{preset.name}: prepared already" in capsys.readouterr().err and len(reads) == 1


def test_softeval_prepare_refuses_an_unknown_name_before_preparing_any(fake_preset, capsys):
    preset, reads = fake_preset
    assert cli.main(["prepare", preset.name, "org/some-model"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown preset 'org/some-model'" in err and "smollm2-135m-instruct" in err and len(err.splitlines()) == 1
    assert reads == [] and not presets.prepared(preset)


def test_one_gguf_reader_builds_a_files_reader_once_and_puts_the_class_back(tmp_path):
    gguf = pytest.importorskip("gguf")
    import numpy as np

    path = tmp_path / "small.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    writer.add_tensor("x", np.arange(4, dtype=np.float32).reshape(2, 2))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    original = gguf.GGUFReader
    with presets.one_gguf_reader():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is first and gguf.GGUFReader(path, "c") is not first
        assert [t.name for t in first.tensors] == ["x"] and np.array_equal(first.tensors[0].data, [[0, 1], [2, 3]])
    assert gguf.GGUFReader is original and gguf.GGUFReader(path) is not first


def _cut_in_half(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_cached_folder_is_prepared_with_a_manifest_of_its_files(fake_preset):
    preset, _ = fake_preset
    presets.prepare(preset)
    saved = presets.converted_path(preset)
    listed = json.loads((saved / presets.MANIFEST).read_text())["files"]
    assert set(listed) == {p.name for p in saved.iterdir()} - {presets.MANIFEST}
    weights = saved / "model.safetensors"
    assert listed["model.safetensors"] == {"bytes": weights.stat().st_size,
                                           "sha256": hashlib.sha256(weights.read_bytes()).hexdigest()}
    assert presets.damage(saved, full=True) is None


def test_a_weights_file_cut_in_half_is_named_with_its_folder_and_prepare_rebuilds_it(fake_preset, capsys):
    """Issue 60, 7: the load said "a weights file is damaged... copy or download the model again" (no path, the
    wrong fix), and `softeval prepare` said "prepared already"."""
    preset, reads = fake_preset
    presets.prepare(preset)
    saved = presets.converted_path(preset)
    _cut_in_half(saved / "model.safetensors")
    with pytest.raises(UserError) as refused:
        models.load_model(preset.name, device="cpu")
    said = str(refused.value)
    assert str(saved) in said and f"softeval prepare {preset.name}" in said and "model.safetensors has" in said
    assert "\n" not in said and len(reads) == 1
    assert cli.main(["prepare", preset.name]) == 0
    err = capsys.readouterr().err
    assert "damaged (model.safetensors has" in err and f"{preset.name}: prepared in" in err and len(reads) == 2
    assert presets.damage(saved, full=True) is None and models.load_model(preset.name, device="cpu")
    assert not list(saved.parent.glob("*.tmp*"))


def test_prepare_finds_a_file_changed_in_place_that_the_sizes_miss(fake_preset, capsys):
    preset, reads = fake_preset
    presets.prepare(preset)
    saved = presets.converted_path(preset)
    weights = saved / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-100:] = bytes(100)  # the last tensor's tail zeroed: the same size, other numbers
    weights.write_bytes(bytes(data))
    assert presets.damage(saved) is None and "sha256" in presets.damage(saved, full=True)
    assert cli.main(["prepare", preset.name]) == 0
    assert "model.safetensors differs from when it was prepared" in capsys.readouterr().err and len(reads) == 2
    assert presets.damage(saved, full=True) is None


def test_a_load_that_fails_on_a_folder_of_the_right_sizes_is_checked_byte_by_byte(fake_preset):
    preset, _ = fake_preset
    presets.prepare(preset)
    saved = presets.converted_path(preset)
    weights = saved / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[8:40] = b"!" * 32  # the header is no JSON now
    weights.write_bytes(bytes(data))
    with pytest.raises(UserError, match="model.safetensors differs from when it was prepared") as refused:
        models.load_model(preset.name, device="cpu")
    assert str(saved) in str(refused.value) and f"softeval prepare {preset.name}" in str(refused.value)


def test_a_folder_prepared_before_manifests_is_checked_by_its_headers_and_given_a_manifest(fake_preset, capsys):
    preset, reads = fake_preset
    presets.prepare(preset)
    saved = presets.converted_path(preset)
    (saved / presets.MANIFEST).unlink()
    assert cli.main(["prepare", preset.name]) == 0  # intact: its manifest written, nothing prepared again
    assert "prepared already, checked" in capsys.readouterr().err and len(reads) == 1
    assert presets.damage(saved, full=True) is None and (saved / presets.MANIFEST).is_file()
    (saved / presets.MANIFEST).unlink()
    _cut_in_half(saved / "model.safetensors")
    with pytest.raises(UserError, match=r"model.safetensors is cut short|model.safetensors has \d+ bytes, its header"):
        models.load_model(preset.name, device="cpu")
    assert cli.main(["prepare", preset.name]) == 0 and len(reads) == 2
    assert presets.damage(saved, full=True) is None


def test_an_unreadable_manifest_is_damage(fake_preset):
    preset, _ = fake_preset
    presets.prepare(preset)
    saved = presets.converted_path(preset)
    (saved / presets.MANIFEST).write_text("[1, 2")
    assert "cannot be read" in presets.damage(saved)
    (saved / presets.MANIFEST).write_text('{"files": []}')
    assert "not a manifest" in presets.damage(saved)
    with pytest.raises(UserError, match="softeval prepare"):
        models.load_model(preset.name, device="cpu")


def test_a_cache_that_cannot_be_written_is_one_line_before_the_gguf_is_read(fake_preset, tmp_path, monkeypatch,
                                                                           capsys):
    """Issue 60, 8: SOFTEVAL_CACHE=<read-only dir> softeval prepare gave an OSError traceback."""
    preset, reads = fake_preset
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SOFTEVAL_CACHE", str(blocker))  # no folder can be made under a file, even by root
    assert cli.main(["prepare", preset.name]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot write the model cache at" in err and str(blocker) in err
    assert "SOFTEVAL_CACHE" in err and reads == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_cache_folder_is_one_line(fake_preset, tmp_path, monkeypatch, capsys):
    preset, reads = fake_preset
    cache = tmp_path / "read-only"
    cache.mkdir()
    cache.chmod(0o555)
    monkeypatch.setenv("SOFTEVAL_CACHE", str(cache))
    try:
        assert cli.main(["prepare", preset.name]) == 2
    finally:
        cache.chmod(0o755)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(cache) in err and "SOFTEVAL_CACHE" in err and reads == []


def test_a_gguf_joined_short_is_joined_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SOFTEVAL_CACHE", str(tmp_path / "cache"))
    package = tmp_path / "pkg"
    (package / "data").mkdir(parents=True)
    for i, part in enumerate((b"abc", b"defg")):
        (package / "data" / f"x.gguf.part{i}").write_bytes(part)
    preset = dataclasses.replace(presets.PRESETS["gemma-3-270m"], packages=(("pkg", "pkg==1"),), gguf_name="x.gguf")
    monkeypatch.setattr(presets, "require_package_dir", lambda pkg, pip: package)
    joined = presets.preset_gguf_path(preset)
    assert joined.read_bytes() == b"abcdefg"
    joined.write_bytes(b"abc")
    assert presets.preset_gguf_path(preset).read_bytes() == b"abcdefg"
