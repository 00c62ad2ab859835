"""Run folders: one name rule for writer and readers, the complete run identity, safe checkpoints."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from tiny import tiny_lm

from softeval.run.config import RunConfig
from softeval.run.pipeline import run_job
from softeval.store import index
from softeval.store.format import folder_name

EXAMPLE = Path(__file__).parents[2] / "examples" / "capitals" / "capitals.yaml"


def _capitals(out: Path, task: str, **kw) -> RunConfig:
    base = dict(model="tiny-0", task=task, methods=("zero-shot",), limit=4, steps=2, tokens=2, batch_size=2,
                eval_batch_size=4, curve_items=0, out=str(out))
    return RunConfig(**{**base, **kw})


@pytest.mark.parametrize("how", ["absolute", "relative"])
def test_custom_task_runs_reach_the_index_compare_and_report(tmp_path, monkeypatch, how):
    from softeval.analysis.compare import load_runs
    from softeval.analysis.report import build_report

    if how == "relative":
        monkeypatch.chdir(EXAMPLE.parents[2])
    task = str(EXAMPLE) if how == "absolute" else "examples/capitals/capitals.yaml"
    run_job(_capitals(tmp_path / "runs", task), lm=tiny_lm())
    assert [(r["task"], r["method"]) for r in index.list_runs(tmp_path / "runs")] == [(task, "zero-shot")]
    runs, skipped = load_runs(tmp_path / "runs")
    assert [r.task for r in runs] == [task] and skipped == []
    page = build_report(tmp_path / "runs", tmp_path / "report.html").read_text()
    assert "capitals.yaml" in page


def test_folder_name_is_one_pure_rule():
    assert folder_name("examples/capitals/capitals.yaml") == "capitals.yaml"  # whether the file exists or not
    assert folder_name("/data/tasks/capitals.yml") == "capitals.yml"
    assert folder_name("./models/my-model/") == "my-model"
    assert folder_name("HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB--SmolLM2-135M"
    assert folder_name("my tasks/qa") == "my--tasks--qa"
    assert folder_name("mmlu") == "mmlu"


def _toy(out: Path, **kw) -> RunConfig:
    base = dict(model="tiny-0", task="toyformat", methods=("zero-shot",), limit=6, steps=4, shots=1, tokens=2,
                lr=0.1, out=str(out), curve_every=2, curve_items=4, eval_batch_size=3)
    return RunConfig(**{**base, **kw})


@pytest.fixture
def toy(monkeypatch):
    from tiny import format_task

    from softeval import tasks

    task = format_task()
    monkeypatch.setitem(tasks.TASKS, task.name, task)
    return task


def test_kind_base_then_no_kind_is_not_reported_as_the_same_run(toy, tmp_path):
    from softeval.errors import UserError

    run_job(_toy(tmp_path, kind="base"), lm=tiny_lm())
    with pytest.raises(UserError, match=r"other settings.*kind: 'base' -> None"):
        run_job(_toy(tmp_path), lm=tiny_lm())


def test_curve_items_is_part_of_the_run_identity(toy, tmp_path):
    from softeval.errors import UserError

    run_job(_toy(tmp_path, methods=("few-shot",)), lm=tiny_lm())
    with pytest.raises(UserError, match=r"other settings.*curve_items: 4 -> 2"):
        run_job(_toy(tmp_path, methods=("few-shot",), curve_items=2), lm=tiny_lm())


def test_identity_is_the_whole_config_but_the_listed_options(toy, tmp_path):
    from dataclasses import fields

    from softeval.store.identity import NOT_IDENTITY, TUNE_DTYPE_RESOLVED, identity_of

    config = _toy(tmp_path)
    # epochs, answer_share: when given; prompt_variant: when not 0 (with the grammar's revision: below)
    every = {f.name for f in fields(RunConfig)} - {"methods", "epochs", "answer_share", "prompt_variant"} | {"method"}
    lora = {"lora_rank", "lora_alpha", "lora_dropout", "lora_lr", "lora_targets"}
    soft = {"lr", "init", "soft_prompt"}
    # and, for tuned runs, the tuning dtype as this machine resolves --tune-dtype
    assert set(identity_of(config.options("soft-prompt"))) == (every - set(NOT_IDENTITY) - {"shots"} - lora
                                                               | {TUNE_DTYPE_RESOLVED})
    assert set(identity_of(config.options("lora"))) == (every - set(NOT_IDENTITY) - {"shots"} - soft
                                                        | {TUNE_DTYPE_RESOLVED})
    assert "epochs" in identity_of(dataclasses.replace(config, epochs=2.0).options("lora"))
    shared = dataclasses.replace(config, answer_share=0.5)
    assert identity_of(shared.options("soft-prompt"))["answer_share"] == 0.5
    assert identity_of(shared.options("soft-prompt"))["answer_line"] == 2  # what the share weighs: with it only
    assert "answer_line" not in identity_of(config.options("soft-prompt"))
    assert not {"answer_share", "answer_line"} & set(identity_of(shared.options("zero-shot")))  # untuned: not read
    variant = identity_of(dataclasses.replace(config, prompt_variant=2).options("zero-shot"))
    assert variant["prompt_variant"] == 2 and variant["prompt_grammar"] == 1  # every method reads the prompt
    # series, step: labels of the model; include_path: where lm-eval YAMLs lie (their content is config.lm_eval)
    assert set(NOT_IDENTITY) == {"out", "force", "wait", "series", "step", "include_path"}
    tuning = {"steps", "lr_schedule", "curve_every", "length_group", "early_stop", "tune_dtype"} | soft | lora
    assert set(identity_of(config.options("few-shot"))) == every - set(NOT_IDENTITY) - tuning
    # the seed, the tuning batch and the held-out slice pick the tuning pool and the shots: not zero-shot's
    pool = {"seed", "batch_size", "curve_items"}
    assert set(identity_of(config.options("zero-shot"))) == every - set(NOT_IDENTITY) - tuning - {"shots"} - pool
    # Output root, --force, --wait: the same run, found and skipped.
    first = run_job(config, lm=tiny_lm())[0]
    moved = tmp_path / "moved"
    moved.mkdir()
    (tmp_path / "tiny-0").rename(moved / "tiny-0")
    again = run_job(_toy(moved, force=False, wait=True), lm=tiny_lm())[0]
    assert again["finished_at"] == first["finished_at"]


def test_a_finished_run_without_a_recorded_option_is_another_run_and_says_why(toy, tmp_path):
    from softeval.errors import UserError

    run_job(_toy(tmp_path), lm=tiny_lm())
    path = tmp_path / "tiny-0/toyformat/zero-shot/seed0/results.json"
    results = json.loads(path.read_text())
    del results["config"]["eval_batch_size"]  # as written by a softeval that did not have the option
    path.write_text(json.dumps(results))
    with pytest.raises(UserError, match=r"eval_batch_size: not recorded -> 3.*--force"):
        run_job(_toy(tmp_path), lm=tiny_lm())


def test_options_a_method_does_not_read_do_not_make_its_run_another(toy, tmp_path):
    """New tuning settings or another --shots leave a finished zero-shot run finished (it read neither);
    the methods that read them are run again or refused."""
    from softeval.errors import UserError

    first = run_job(_toy(tmp_path, methods=("zero-shot", "few-shot")), lm=tiny_lm())
    other = dict(steps=6, lr=0.2, init="random", curve_every=3, length_group=2, early_stop=False)
    again = run_job(_toy(tmp_path, methods=("zero-shot", "few-shot"), **other), lm=tiny_lm())
    assert [r["finished_at"] for r in again] == [r["finished_at"] for r in first]
    zero = run_job(_toy(tmp_path, methods=("zero-shot",), shots=2), lm=tiny_lm())[0]
    assert zero["finished_at"] == first[0]["finished_at"]
    with pytest.raises(UserError, match=r"other settings.*shots: 1 -> 2"):
        run_job(_toy(tmp_path, methods=("few-shot",), shots=2), lm=tiny_lm())
    run_job(_toy(tmp_path, methods=("soft-prompt",)), lm=tiny_lm())
    with pytest.raises(UserError, match=r"other settings.*steps: 4 -> 6"):
        run_job(_toy(tmp_path, methods=("soft-prompt",), steps=6), lm=tiny_lm())


def test_an_interrupted_run_with_other_settings_is_dropped_with_a_message(toy, tmp_path, capsys):
    config = _toy(tmp_path, methods=("soft-prompt",))
    run_job(config, lm=tiny_lm())
    done = tmp_path / "tiny-0/toyformat/soft-prompt/seed0"
    partial = done.parent / (done.name + ".partial")
    done.rename(partial)  # as if killed before the final rename
    results = json.loads((partial / "results.json").read_text())
    (partial / "config.json").write_text(json.dumps(results["config"]))
    run_job(_toy(tmp_path, methods=("soft-prompt",), steps=6), lm=tiny_lm())
    out = " ".join(capsys.readouterr().err.split())  # the run's console writes to stderr, wrapped
    assert "interrupted run with other settings" in out and "steps: 4 -> 6" in out and "starts afresh" in out
    assert json.loads((done / "results.json").read_text())["config"]["steps"] == 6


def test_negative_curve_items_is_refused(toy, tmp_path, capsys):
    from softeval import cli

    code = cli.main(["run", "--model", "tiny-0", "--task", "toyformat", "--curve-items", "-1", "--out", str(tmp_path)])
    assert code == 2 and "--curve-items must be between 0" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_eval_with_a_changed_soft_prompt_at_the_same_path_is_another_run(toy, tmp_path):
    import shutil

    from softeval.errors import UserError

    for seed in (0, 1):
        run_job(_toy(tmp_path / f"t{seed}", methods=("soft-prompt",), seed=seed), lm=tiny_lm())
    adapter = tmp_path / "adapter"
    shutil.copytree(tmp_path / "t0/tiny-0/toyformat/soft-prompt/seed0/soft_prompt", adapter)
    first = run_job(_toy(tmp_path / "e", methods=("soft-prompt",), soft_prompt=str(adapter)), lm=tiny_lm())[0]
    assert len(first["config"]["soft_prompt_sha256"]) == 64
    shutil.rmtree(adapter)  # the same path now holds another soft prompt
    shutil.copytree(tmp_path / "t1/tiny-0/toyformat/soft-prompt/seed1/soft_prompt", adapter)
    with pytest.raises(UserError, match="other settings.*soft_prompt_sha256"):
        run_job(_toy(tmp_path / "e", methods=("soft-prompt",), soft_prompt=str(adapter)), lm=tiny_lm())


def test_an_interrupted_run_with_a_damaged_config_is_dropped_with_one_reason(toy, tmp_path, capsys):
    run_job(_toy(tmp_path, methods=("soft-prompt",)), lm=tiny_lm())
    done = tmp_path / "tiny-0/toyformat/soft-prompt/seed0"
    partial = done.parent / (done.name + ".partial")
    done.rename(partial)
    (partial / "config.json").write_bytes(b'{"steps": 4, "lr"')  # torn write
    run_job(_toy(tmp_path, methods=("soft-prompt",)), lm=tiny_lm())
    out = " ".join(capsys.readouterr().err.split())
    assert "its config.json is damaged" in out and "not recorded" not in out
    assert (done / "results.json").is_file()


def test_a_checkpoint_is_compared_by_its_fingerprint_when_both_records_carry_one():
    """The one rule (identity.identity_diff): both fingerprinted, the path is not identity; either one from
    before fingerprints, the path is compared as it was."""
    from softeval.store.identity import FINGERPRINT, identity_diff

    old = {"model": "/a/run/checkpoint-5", "method": "zero-shot", FINGERPRINT: "f" * 64}
    assert identity_diff(old, {**old, "model": "/b/moved/checkpoint-5"}) == []
    [line] = identity_diff(old, {**old, FINGERPRINT: "e" * 64})
    assert line.startswith(f"{FINGERPRINT}: the contents of checkpoint /a/run/checkpoint-5 differ")
    [line] = identity_diff(old, {**old, "model": "/b/checkpoint-5", FINGERPRINT: "e" * 64})
    assert "checkpoint /b/checkpoint-5 differ from those of /a/run/checkpoint-5" in line
    before = {"model": "/a/run/checkpoint-5", "method": "zero-shot"}  # recorded before fingerprints
    assert identity_diff(before, old) == []
    assert identity_diff(before, {**old, "model": "/b/checkpoint-5"}) == [
        "model: '/a/run/checkpoint-5' -> '/b/checkpoint-5'"]


def _series_checkpoint(folder: Path, seed: int = 0) -> Path:
    from tiny import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    tiny_model(len(tok), seed=seed).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_a_run_recorded_before_fingerprints_resumes_in_place_and_is_refused_elsewhere(toy, tmp_path):
    import shutil

    from softeval.errors import UserError
    from softeval.store.identity import FINGERPRINT

    ckpt = _series_checkpoint(tmp_path / "run" / "checkpoint-5")
    out = tmp_path / "out"
    first = run_job(_toy(out, model=str(ckpt), series="run", step=5), lm=tiny_lm())[0]
    assert isinstance(first["config"][FINGERPRINT], str)
    path = out / "run--checkpoint-5/toyformat/zero-shot/seed0/results.json"
    results = json.loads(path.read_text())
    del results["config"][FINGERPRINT]  # as written by a softeval that did not fingerprint checkpoints
    path.write_text(json.dumps(results))
    again = run_job(_toy(out, model=str(ckpt), series="run", step=5), lm=tiny_lm())[0]
    assert again["finished_at"] == first["finished_at"]  # in place: finished
    moved = tmp_path / "moved" / "run" / "checkpoint-5"
    moved.parent.parent.mkdir()
    shutil.move(tmp_path / "run", moved.parent)
    with pytest.raises(UserError, match=r"other settings.*model: '.*/run/checkpoint-5' -> '.*/moved/run/checkpoint-5'"):
        run_job(_toy(out, model=str(moved), series="run", step=5), lm=tiny_lm())


def test_an_interrupted_series_run_resumes_from_a_moved_folder(toy, tmp_path):
    """The .partial folder's identity and the tuning checkpoint's follow the same rule: a series folder moved
    while a run of it was interrupted keeps its saved work."""
    import shutil

    from softeval.run.pipeline import run_folder
    from softeval.store.identity import identity_of

    ckpt = _series_checkpoint(tmp_path / "run" / "checkpoint-5")
    config = _toy(tmp_path / "out", model=str(ckpt), series="run", step=5, methods=("soft-prompt",))
    folder, identity = run_folder(config, "soft-prompt")
    folder.start(identity)
    (folder.partial / "outputs.jsonl").write_text("")
    shutil.move(tmp_path / "run", tmp_path / "moved")
    moved = replace_model(config, str(tmp_path / "moved" / "checkpoint-5"))
    logged = []
    folder.start(run_folder(moved, "soft-prompt")[1], log=logged.append)
    assert logged == [] and (folder.partial / "outputs.jsonl").exists()
    assert identity_of(run_folder(moved, "soft-prompt")[1]) == identity_of(identity)  # what tune_state.json records


def replace_model(config: RunConfig, model: str) -> RunConfig:
    from dataclasses import replace

    return replace(config, model=model)
