"""A method that another distribution adds (tests/support/toymethod.py: zero-shot with a fixed line before each
question, a BASELINE registered through the entry-point group ``softeval.methods``) runs through `softeval run`,
`runs`, `compare`, `report` and a sweep exactly as a built-in does, with no change to softeval
(docs/reference/architecture.md, "Adding a method")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from sweepfiles import write_tasks
from tiny import tiny_lm, tiny_model, tiny_tokenizer
from toymethod import NAME, PREFIX, install

from softeval import methods
from softeval.cli.app import main
from softeval.run import pipeline, validate
from softeval.store import index
from softeval.store.identity import identity_of


@pytest.fixture
def prefixed(tmp_path, monkeypatch):
    """The distribution installed for one test (its folder on sys.path, the registry reading entry points again)."""
    monkeypatch.syspath_prepend(str(install(tmp_path / "site")))
    methods.REGISTRY.reread()
    yield
    sys.modules.pop("softeval_prefixed", None)
    monkeypatch.undo()
    methods.REGISTRY.reread()


def _samples(out: Path, method: str) -> list[dict]:
    path = out / "tiny-0" / "toyformat" / method / "seed0" / "samples.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_method_of_another_distribution_runs_compares_and_reports_as_a_built_in(prefixed, toy, tmp_path,
                                                                                 monkeypatch, capsys):
    monkeypatch.setattr(pipeline, "load_model", lambda name, **kw: tiny_lm())
    monkeypatch.setattr(validate, "check_model_name", lambda name: None)
    assert NAME in methods.names() and NAME not in methods.default_names()
    assert methods.pairs() == (("zero-shot", "soft-prompt"), ("few-shot", "soft-prompt"),
                               ("prefix-tuning", "soft-prompt"), (NAME, "soft-prompt"), ("zero-shot", "few-shot"),
                               ("zero-shot", "prefix-tuning"), ("zero-shot", NAME))
    out = tmp_path / "out"
    assert main(["run", "--model", "tiny-0", "--task", "toyformat", "--out", str(out), "--limit", "12", "--steps",
                 "6", "--shots", "2", "--tokens", "4", "--lr", "0.1", "--curve-every", "3", "--curve-items", "4",
                 "--method", f"zero-shot,{NAME},soft-prompt"]) == 0
    said = capsys.readouterr()
    assert f"{NAME}: wrote" in said.err
    assert f"verdict, soft-prompt vs {NAME}:" in said.out  # the treatment against the new baseline
    bare, framed = _samples(out, "zero-shot"), _samples(out, NAME)
    assert [s["id"] for s in framed] == [s["id"] for s in bare]
    # its frame, and nothing else, sets its prompts apart: the fixed line before each question
    assert all(p["prompt"] != b["prompt"] and p["prompt"].replace(PREFIX, "", 1) == b["prompt"]
               for b, p in zip(bare, framed))
    record = json.loads((out / "tiny-0" / "toyformat" / NAME / "seed0" / "results.json").read_text())
    assert record["method"] == NAME and record["tuning"] is None
    # it reads what zero-shot reads: no seed, shots or tuning option enters its identity
    assert set(identity_of(record["config"])) == set(identity_of({**record["config"], "method": "zero-shot"}))
    assert not {"seed", "shots", "steps", "lr", "lora_rank"} & set(identity_of(record["config"]))

    assert main(["runs", str(out), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert sorted(r["method"] for r in listed) == sorted(["zero-shot", NAME, "soft-prompt"])

    assert main(["compare", str(out), "--json"]) == 0
    paired = json.loads(capsys.readouterr().out)["paired_tests"]
    assert {(t["a"], t["b"]) for t in paired} == {("zero-shot", "soft-prompt"), (NAME, "soft-prompt")}

    report = tmp_path / "report.html"
    assert main(["report", str(out), "-o", str(report)]) == 0
    page = report.read_text()
    assert page.count(NAME) >= 2 and "Skipped" not in page  # its column and its paired test, like few-shot's


def test_an_entry_point_that_does_not_load_is_one_line_when_chosen_and_breaks_nothing_else(prefixed, capsys):
    assert "broken" not in methods.names() and methods.spec_of("zero-shot").label == "zero-shot"  # not taken over
    assert main(["run", "--model", "m", "--task", "mmlu", "--method", "zero-shot,broken"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: method broken (softeval.methods entry point softeval_not_installed:SPEC of softeval-prefixed) does not "
        "load (ModuleNotFoundError: No module named 'softeval_not_installed'): fix or reinstall that package, or "
        "choose another method")


def test_a_sweep_scores_a_method_its_workers_have_installed(prefixed, ray_cluster, tmp_path):
    """The sweep's workers (other processes, on the cluster) find the method through its entry point, as a user's
    cluster with the package installed would (conftest's ray_cluster puts the distribution on their path)."""
    tok = tiny_tokenizer()
    model = tmp_path / "tiny-7"
    tiny_model(len(tok), seed=7).save_pretrained(model)
    tok.save_pretrained(model)
    task = tmp_path / write_tasks(tmp_path)[0]
    out = tmp_path / "out"
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "out": str(out), "models": [{"name": str(model), "kind": "base"}], "tasks": [str(task)],
        "methods": ["zero-shot", NAME], "limit": 6, "tokens": 2, "eval_batch_size": 8}, sort_keys=False))
    assert main(["sweep", str(sweep)]) == 0
    runs = {r["method"]: r for r in index.list_runs(out)}
    assert set(runs) == {"zero-shot", NAME}
    framed = [json.loads(line) for f in out.glob(f"tiny-7/*/{NAME}/seed0/samples.jsonl")
              for line in f.read_text().splitlines()]
    assert len(framed) == 6 and all(s["prompt"].count(PREFIX) == 1 for s in framed)
