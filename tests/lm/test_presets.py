"""The one-time preparation of a packaged model (lm/presets.py) and `softeval prepare`: phases in order, the
cached folder written once and then read by every load, bad names refused before anything is prepared."""

from __future__ import annotations

import dataclasses

import pytest
from tiny import tiny_model, tiny_tokenizer

from softeval import cli
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
