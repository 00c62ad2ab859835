"""--init from:PATH: a run's soft prompt starts from a saved one (shape-checked), and its identity is
the saved soft prompt's digest, not where it lies."""

import json
import shutil

import pytest
import torch
from tiny import tiny_lm, toy_config

from softeval.cli.app import main
from softeval.errors import UserError
from softeval.lm.softprompt import SoftPrompt, adapter_digest
from softeval.run.pipeline import run_job


def _config(out, **kw):
    return toy_config(out, **{**dict(methods=("soft-prompt",), limit=6, steps=4, curve_every=2, eval_batch_size=6),
                              **kw})


def _source(tmp_path, hidden=32, tokens=4):
    lm = tiny_lm(hidden=hidden)
    soft = SoftPrompt.initialise(lm, tokens, "random", seed=7)
    folder = tmp_path / f"src{hidden}x{tokens}"
    soft.save(folder, lm, {"task": "toyformat", "seed": 0})
    return folder, soft


def test_warm_start_begins_at_the_saved_soft_prompt(toy, tmp_path):
    folder, soft = _source(tmp_path)
    lm = tiny_lm()
    started = SoftPrompt.initialise(lm, 4, f"from:{folder}")
    assert torch.equal(started.weight.detach(), soft.weight.detach())
    result = run_job(_config(tmp_path / "out", init=f"from:{folder}", steps=1, lr=1e-9), lm=lm)[0]
    tuned = SoftPrompt.load(tmp_path / "out" / "tiny-0" / "toyformat" / "soft-prompt" / "seed0" / "soft_prompt", lm)
    assert torch.allclose(tuned.weight, soft.weight, atol=1e-6)  # one step at lr 1e-9: still the source
    record = result["tuning"]["init_from"]
    assert record["sha256"] == adapter_digest(folder) and record["task"] == "toyformat"
    assert result["config"]["init"] == f"from:sha256:{record['sha256']}"


def test_moving_the_source_keeps_the_run_and_changing_it_does_not(toy, tmp_path):
    folder, _ = _source(tmp_path)
    first = run_job(_config(tmp_path / "out", init=f"from:{folder}"), lm=tiny_lm())[0]
    moved = tmp_path / "moved"
    shutil.move(folder, moved)
    again = run_job(_config(tmp_path / "out", init=f"from:{moved}"), lm=tiny_lm())[0]
    assert again["finished_at"] == first["finished_at"]  # skipped: same identity
    SoftPrompt(torch.zeros(4, 32)).save(moved, tiny_lm())
    with pytest.raises(UserError, match="finished run with other settings.*init"):
        run_job(_config(tmp_path / "out", init=f"from:{moved}"), lm=tiny_lm())


def test_shape_mismatch_is_refused(toy, tmp_path):
    wide, _ = _source(tmp_path, hidden=48)
    with pytest.raises(UserError, match=r"shape \(4, 48\).*needs \[num_virtual_tokens, 32\]"):
        run_job(_config(tmp_path / "out", init=f"from:{wide}"), lm=tiny_lm())
    assert not list((tmp_path / "out").rglob("results.json"))
    eight, _ = _source(tmp_path, tokens=8)
    with pytest.raises(UserError, match="has 8 virtual tokens.*--tokens 4: pass --tokens 8"):
        run_job(_config(tmp_path / "out", init=f"from:{eight}"), lm=tiny_lm())


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "nowhere", "no such folder"),
    (lambda p: p, "no soft prompt at"),
    (lambda p: (p / "x.json").write_text("{}") or p / "x.json", "no such folder"),
])
def test_bad_init_path_exits_2_before_any_model_loads(tmp_path, capsys, monkeypatch, make, message):
    import softeval.run.pipeline as pipeline

    monkeypatch.setattr(pipeline, "load_model", lambda *a, **k: pytest.fail("model loaded"))
    code = main(["run", "--model", "gemma-3-270m", "--task", "mmlu", "--init", f"from:{make(tmp_path)}",
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_damaged_adapter_is_one_line(tmp_path):
    from softeval.run.validate import check_init

    (tmp_path / "adapter_model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(UserError, match="cannot read soft prompt"):
        check_init(f"from:{tmp_path}", 4)
    json.dumps({})
