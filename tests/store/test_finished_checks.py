"""What a finished run folder must agree on before anything reads it (softeval.store.format's validators
and RunFolder.check): a results.json that its samples do not give, a soft-prompt run without its
adapter and samples that share an item id are damage, skipped by every reader with the reason, and a
damaged run is moved aside so `softeval run` makes it again."""

from __future__ import annotations

import json
import shutil

from runfactory import Items, outcomes, write_run

from softeval import cli
from softeval.store import index
from softeval.store.format import scan
from softeval.store.runs import RunFolder


def test_a_run_whose_items_share_an_id_is_read_by_nothing_downstream(tmp_path, capsys):
    """A run written before ids were checked (four items all 'same'): compare would key them into one
    item, so every reader skips the run, saying why."""
    write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(4, 0.5), items=Items(ids=["same"] * 4))
    report = scan(tmp_path)
    assert report.runs == []
    assert "rows 1 and 2 are both item 'same'" in report.skipped[0][1]
    assert cli.main(["runs", str(tmp_path)]) == 0
    assert "0 finished runs" in capsys.readouterr().out


def test_a_hand_edited_results_json_is_damage_not_believed(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    run_dir = write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(4, 0.5))
    index.rebuild(tmp_path)  # indexed while intact: the listing must notice the edit
    results = json.loads((run_dir / "results.json").read_text())
    results["metrics"]["accuracy"]["value"] = 0.99
    (run_dir / "results.json").write_text(json.dumps(results))
    why = ("results.json says metrics.accuracy.value is 0.99 (the samples give 0.5), not what its "
           "samples.jsonl gives")
    assert why in scan(tmp_path).skipped[0][1]
    assert cli.main(["runs", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "0.990" not in captured.out and "0 finished runs" in captured.out
    folder = RunFolder(tmp_path, run_dir)
    assert folder.finished() == (None, folder.finished()[1]) and why in folder.finished()[1]
    assert folder.check({}, force=False, log=lambda m: None) is False  # `softeval run` scores it again
    assert not run_dir.exists() and len(list(run_dir.parent.glob(".seed0.damaged-*"))) == 1


def test_every_number_results_json_shows_is_checked(tmp_path):
    run_dir = write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(8, 0.5))
    intact = json.loads((run_dir / "results.json").read_text())
    edits = {"n (8 -> 9)": lambda r: r.update(n=9),
             "a metric the samples do not give": lambda r: r["metrics"].update(f1=r["metrics"]["accuracy"]),
             "an interval": lambda r: r["metrics"]["lenient_accuracy"].update(ci_high=1.0),
             "the top answer": lambda r: r["answers"]["strict"][0].__setitem__(1, 7)}
    for what, edit in edits.items():
        results = json.loads(json.dumps(intact))
        edit(results)
        (run_dir / "results.json").write_text(json.dumps(results))
        assert scan(tmp_path).runs == [], what
    (run_dir / "results.json").write_text(json.dumps(intact))
    assert len(scan(tmp_path).runs) == 1


def test_a_soft_prompt_run_without_its_adapter_is_damage(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    run_dir = write_run(tmp_path, "model-a", "mmlu", "soft-prompt", outcomes(4, 0.5))
    assert len(index.list_runs(tmp_path)) == 1
    shutil.rmtree(run_dir / "soft_prompt")
    skipped = []
    assert index.list_runs(tmp_path, on_skip=lambda path, why: skipped.append(why)) == []
    assert skipped == ["a soft-prompt run without its adapter (soft_prompt/adapter_model.safetensors is "
                       "missing): damaged (rerun it with `softeval run` and the same options)"]
    folder = RunFolder(tmp_path, run_dir)
    assert folder.check({}, force=False, log=lambda m: None) is False  # not skipped: tuned again
    assert not run_dir.exists()
