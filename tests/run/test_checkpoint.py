"""Tuning checkpoints: safetensors + JSON, never a pickle; damaged or foreign ones are discarded."""

from __future__ import annotations

import json
import os

import pytest
import torch
from tiny import format_task

from softeval.run.prompting import Prompter
from softeval.run.tuning_loop import Kept, TuneConfig, tune

CFG = TuneConfig(num_tokens=3, steps=6, curve_every=3, curve_items=4)


class Payload:
    """Unpickling this runs code: it makes a folder (a stand-in for anything worse)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _setup(lm):
    task = format_task()
    items = task.load().tune
    return Prompter(lm, task, chat=False, shots=[]), items[4:], items[:4]


def _interrupted(lm, folder, identity=None, at=4):
    prompter, train, held = _setup(lm)

    def interrupt(point):
        if point["step"] == at:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tune(lm, prompter, train, held, CFG, Kept(folder, identity), on_step=interrupt)


def test_tuning_checkpoint_is_safetensors_and_json_not_a_pickle(lm, tmp_path):
    _interrupted(lm, tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["tune_state-3.safetensors", "tune_state.json"]
    record = json.loads((tmp_path / "tune_state.json").read_text())
    assert record["step"] == 3 and record["seconds"] > 0 and len(record["rng"]["torch"]) > 0
    assert [p["step"] for p in record["curve"]] == [0, 1, 2, 3]


def test_planted_pickle_checkpoint_is_never_unpickled(lm, tmp_path):
    marker = tmp_path / "payload-ran"
    torch.save({"soft": Payload(marker), "step": 3}, tmp_path / "tune_state.pt")
    planted = (tmp_path / "tune_state.pt").read_bytes()
    prompter, train, held = _setup(lm)
    said = []
    resumed = tune(lm, prompter, train, held, CFG, Kept(tmp_path, log=said.append))
    assert not marker.exists()
    assert (tmp_path / "tune_state.pt").read_bytes() == planted and said == []  # not read: no checkpoint file
    fresh = tune(lm, prompter, train, held, CFG)
    torch.testing.assert_close(resumed.part.weight, fresh.part.weight, rtol=0, atol=0)


@pytest.mark.parametrize("damage", ["json-bytes", "tensor-bytes", "tensor-gone", "other-shape", "foreign-json"])
def test_corrupt_or_foreign_tuning_checkpoint_is_discarded_and_tuning_restarts(lm, tmp_path, damage):
    _interrupted(lm, tmp_path)
    state, tensors = tmp_path / "tune_state.json", tmp_path / "tune_state-3.safetensors"
    if damage == "json-bytes":
        state.write_bytes(os.urandom(300))
    elif damage == "tensor-bytes":
        tensors.write_bytes(os.urandom(300))
    elif damage == "tensor-gone":
        tensors.unlink()
    elif damage == "other-shape":  # a checkpoint of a run with more virtual tokens, sha256 made to match
        from safetensors.torch import save_file

        from softeval.store.checkpoint import _sha256

        save_file({"soft": torch.zeros(5, 32)}, str(tensors))
        record = json.loads(state.read_text())
        state.write_text(json.dumps({**record, "sha256": _sha256(tensors)}))
    else:
        state.write_text(json.dumps({"step": 3, "soft": [1, 2]}))
    prompter, train, held = _setup(lm)
    said = []
    resumed = tune(lm, prompter, train, held, CFG, Kept(tmp_path, log=said.append))
    assert len(said) == 1 and said[0].startswith("discarded the tuning checkpoint") and "afresh" in said[0]
    assert resumed.resumed_at == []
    fresh = tune(lm, prompter, train, held, CFG)
    torch.testing.assert_close(resumed.part.weight, fresh.part.weight, rtol=0, atol=0)


def test_checkpoint_of_another_run_identity_is_not_resumed(lm, tmp_path):
    _interrupted(lm, tmp_path, identity={"model": "a", "kind": "base"})
    prompter, train, held = _setup(lm)
    said = []
    result = tune(lm, prompter, train, held, CFG, Kept(tmp_path, {"model": "a", "kind": None}, said.append))
    assert "other settings" in said[0] and result.resumed_at == []


@pytest.mark.parametrize(("key", "value"), [("step", "3"), ("step", 99), ("curve", [5]), ("seconds", None),
                                            ("loss", "x"), ("resumed_at", None)])
def test_checkpoint_json_with_a_wrongly_typed_entry_is_discarded(lm, tmp_path, key, value):
    """The tensors are covered by their sha256, the JSON only by being JSON: an edited or planted
    tune_state.json whose step, curve, loss, seconds or resumed_at is not what tuning wrote is
    discarded (tuning afresh), not a traceback halfway through tuning."""
    _interrupted(lm, tmp_path)
    state = tmp_path / "tune_state.json"
    state.write_text(json.dumps({**json.loads(state.read_text()), key: value}))
    prompter, train, held = _setup(lm)
    said = []
    resumed = tune(lm, prompter, train, held, CFG, Kept(tmp_path, log=said.append))
    assert len(said) == 1 and said[0].startswith("discarded the tuning checkpoint") and key in said[0]
    assert resumed.resumed_at == [] and resumed.steps_run == CFG.steps and not list(tmp_path.glob("*.tmp"))
