"""A series in a sweep: `softeval track` on a tiny model's checkpoints trained in the test session
(conftest.trained_series), each soft prompt warm-started from the previous checkpoint's."""

import json
import sys
from pathlib import Path

import pytest

from softeval.cli.app import main
from softeval.errors import UserError
from softeval.lm.softprompt import adapter_digest
from softeval.sweep.file import parse_sweep

TRACK = ["--method", "zero-shot,soft-prompt", "--steps", "30", "--warm-steps", "10", "--tokens", "4", "--lr", "0.03",
         "--curve-every", "10", "--curve-items", "8", "--eval-batch-size", "24"]


def _results(out: Path) -> dict[tuple[int, str], dict]:
    found = {}
    for path in out.glob("run--checkpoint-*/facts.yaml/*/seed0/results.json"):
        r = json.loads(path.read_text())
        found[(r["step"], r["method"])] = r
    return found


def test_track_runs_checkpoints_in_order_warm_started_then_a_rerun_skips_them(ray_cluster, trained_series, tmp_path,
                                                                             capsys):
    out = tmp_path / "out"
    args = ["track", str(trained_series["folder"]), "--task", str(trained_series["task"]), "--out", str(out), *TRACK]
    assert main(args) == 0
    results = _results(out)
    steps = [100, 200, 300, 400]
    assert sorted(results) == [(s, m) for s in steps for m in ("soft-prompt", "zero-shot")]
    assert all(r["series"] == "run" for r in results.values())
    first = results[(100, "soft-prompt")]["tuning"]
    assert "init_from" not in first and first["steps_run"] == 30
    for before, step in zip(steps, steps[1:]):
        tuning = results[(step, "soft-prompt")]["tuning"]
        source = out / f"run--checkpoint-{before}" / "facts.yaml" / "soft-prompt" / "seed0" / "soft_prompt"
        assert tuning["init_from"]["sha256"] == adapter_digest(source)  # started from the previous soft prompt
        assert (tuning["init_from"]["series"], tuning["init_from"]["step"]) == ("run", before)
        assert tuning["steps_run"] == 10
    from softeval.store import index

    rows = index.list_runs(out)
    assert sorted((r["step"], r["method"]) for r in rows) == sorted(results) and {r["series"] for r in rows} == {"run"}
    assert "Training runs (series)" in (out / "report.html").read_text()

    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(args) == 0  # a rerun: every checkpoint finished, nothing runs, no file changes
    assert "nothing to run" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == stamps


def test_series_entries_in_a_sweep_file(trained_series, tmp_path):
    folder = trained_series["folder"]
    spec = {"out": "out", "tasks": [str(trained_series["task"])], "methods": ["soft-prompt"], "steps": 8,
            "models": [{"name": "late", "checkpoints": [{"path": str(folder / "checkpoint-400"), "step": 4},
                                                       {"path": str(folder / "checkpoint-300"), "step": 3}],
                        "warm_steps": 2},
                       {"series": str(folder), "warm_start": "none"},
                       {"series": str(folder), "name": "default", "methods": ["soft-prompt"]}]}
    sweep = parse_sweep(spec, tmp_path / "s.yaml")
    labels = [j.model.label for j in sweep.jobs]
    assert labels == ["late@3", "late@4", "run@100", "run@200", "run@300", "run@400",
                      "default@100", "default@200", "default@300", "default@400"]
    late3, late4 = sweep.jobs[:2]
    assert late4.warm_from is late3 and late4.config.steps == 2 and late3.config.steps == 8
    assert all(j.warm_from is None for j in sweep.jobs[2:7])
    assert [j.config.steps for j in sweep.jobs[6:]] == [8, 3, 3, 3]  # a third of steps, rounded up
    assert late4.resolved() is None  # the soft prompt it starts from is not written yet
    for bad, message in [({"series": str(folder), "name": "late"}, "two series are named 'late'"),
                         ({"series": str(folder), "warm_start": "yes"}, "warm_start must be previous or none"),
                         ({"series": str(folder), "post_trained": "x"}, "unknown key 'post_trained'"),
                         ({"series": str(tmp_path)}, "no checkpoint folders"),
                         ({"series": str(folder), "name": 5}, r"'name' must be text .*, not 5$"),
                         ({"checkpoints": [str(folder / "checkpoint-100")], "name": 5},
                          r"'name' must be text .*not 5$"),
                         ({"checkpoints": [str(folder / "checkpoint-100")], "name": " "}, "'name' must be text"),
                         ({"checkpoints": [str(folder / "checkpoint-100")]}, "given as 'checkpoints' needs a 'name'")]:
        with pytest.raises(UserError, match=message):
            parse_sweep({**spec, "models": [spec["models"][0], bad]}, tmp_path / "s.yaml")
    with pytest.raises(UserError, match="two series are named 'run'"):
        parse_sweep({**spec, "models": [{"series": str(folder)}, {"series": str(folder)}]}, tmp_path / "s.yaml")


def test_track_dry_run_lists_the_checkpoints_in_step_order(trained_series, tmp_path, capsys):
    assert main(["track", str(trained_series["folder"]), "--task", str(trained_series["task"]), "--out",
                 str(tmp_path / "out"), "--method", "zero-shot", "--dry-run"]) == 0
    text = capsys.readouterr().out
    at = [text.index(f"run@{s}") for s in (100, 200, 300, 400)]
    assert at == sorted(at)
    assert not (tmp_path / "out").exists()


def _random_checkpoints(folder: Path, steps, seed: int = 0) -> None:
    from tiny import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    for step in steps:
        tiny_model(len(tok), seed=seed + step).save_pretrained(folder / f"checkpoint-{step}")
        tok.save_pretrained(folder / f"checkpoint-{step}")


def _small(task: Path, out: Path) -> list[str]:
    return ["--task", str(task), "--out", str(out), "--method", "zero-shot,soft-prompt", "--limit", "4",
            "--steps", "2", "--tokens", "2", "--shots", "1", "--batch-size", "4", "--eval-batch-size", "4",
            "--curve-every", "100", "--curve-items", "4"]


def test_a_moved_series_folder_resumes_and_runs_only_the_checkpoints_added_since(ray_cluster, tmp_path, capsys):
    """A checkpoint is what its folder holds (its fingerprint), not where it lies: the series folder moved, and
    renamed with its old name given by --name, is the same series, so a rerun skips what is finished instead
    of refusing every run (exit 2) or starting a second series."""
    import shutil

    from sweepfiles import write_tasks

    from softeval.store import index

    task = tmp_path / write_tasks(tmp_path)[0]
    _random_checkpoints(tmp_path / "ckpts", (100, 200))
    out = tmp_path / "out"
    small = _small(task, out)
    assert main(["track", str(tmp_path / "ckpts"), *small]) == 0
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("results.json")}
    assert len(stamps) == 4

    moved = tmp_path / "elsewhere" / "renamed"
    moved.parent.mkdir()
    shutil.move(tmp_path / "ckpts", moved)
    _random_checkpoints(moved, (300,))
    capsys.readouterr()
    assert main(["track", str(moved), "--name", "ckpts", *small]) == 0, capsys.readouterr().err
    assert "2 done, 4 skipped" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # the finished checkpoints were not run again
    rows = index.list_runs(out)
    assert sorted((r["series"], r["step"], r["method"]) for r in rows) == [
        ("ckpts", s, m) for s in (100, 200, 300) for m in ("soft-prompt", "zero-shot")]
    late = json.loads((out / "ckpts--checkpoint-300" / task.name / "soft-prompt" / "seed0"
                       / "results.json").read_text())
    assert late["tuning"]["init_from"]["step"] == 200  # warm-started from the checkpoint run before the move
    assert late["model"] == str(moved / "checkpoint-300")


def test_another_training_run_with_the_same_folder_names_is_refused_never_skipped(ray_cluster, tmp_path, capsys):
    """`output/checkpoint-100` of two training runs into one --out: same run folders, other weights. The second
    is refused with the checkpoint named; reporting the first run's numbers for it would be silently wrong."""
    from sweepfiles import write_tasks

    task = tmp_path / write_tasks(tmp_path)[0]
    out = tmp_path / "out"
    small = [*_small(task, out), "--method", "zero-shot"]
    _random_checkpoints(tmp_path / "a" / "output", (100,), seed=0)
    assert main(["track", str(tmp_path / "a" / "output"), *small]) == 0
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("results.json")}
    _random_checkpoints(tmp_path / "b" / "output", (100,), seed=7)
    capsys.readouterr()
    assert main(["track", str(tmp_path / "b" / "output"), *small]) == 2
    err = capsys.readouterr().err
    assert "a finished run with other settings" in err and "output--checkpoint-100" in err
    assert f"the contents of checkpoint {tmp_path / 'b' / 'output' / 'checkpoint-100'} differ" in err
    assert "--force" not in err and "--name to track it as another series" in err  # track has no --force
    assert {p: p.stat().st_mtime_ns for p in out.rglob("results.json")} == stamps


def test_track_passes_the_backend_and_engine_arguments_on_to_every_run(trained_series, tmp_path, capsys,
                                                                       monkeypatch):
    from softeval.cli.app import build_parser
    from softeval.cli.track import track_spec

    base = ["track", str(trained_series["folder"]), "--task", str(trained_series["task"]),
            "--out", str(tmp_path / "out"), "--method", "zero-shot", "--dry-run"]
    args = build_parser().parse_args([*base, "--backend", "vllm", "--engine-arg", "max_model_len=1024"])
    spec = track_spec(args)
    assert spec["backend"] == "vllm" and spec["engine_args"] == {"max_model_len": 1024}
    sweep = parse_sweep(spec, tmp_path / "track", where="softeval track", command="track", local=False)
    assert {(j.config.backend, tuple(j.config.engine_args.items())) for j in sweep.jobs} == {
        ("vllm", (("max_model_len", 1024),))}
    assert main([*base, "--engine-arg", "max_model_len=1024"]) == 2  # the run's own refusal, before any model loads
    assert capsys.readouterr().err.strip().endswith("--engine-arg sets a backend's engine, and --backend hf takes no "
                                                    "engine arguments: add --backend vllm, or leave it out")
    # Ray on this machine runs the workers here: without vLLM, `softeval run`'s refusal before Ray starts
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` fails, as where it is not installed
    assert main([*base, "--backend", "vllm"]) == 2
    assert "--backend vllm needs vLLM, which is not installed" in capsys.readouterr().err


def test_track_passes_on_every_option_a_sweep_file_may_set(tmp_path):
    """track's run options are the option table's sweep keys, not a list of its own: each given one goes
    into the sweep it stands for; one not given is left to the run's default."""
    from softeval.cli.app import build_parser
    from softeval.cli.track import PASSED, track_spec
    from softeval.run.config import SWEEP_OPTIONS

    assert PASSED == SWEEP_OPTIONS
    args = build_parser().parse_args(["track", str(tmp_path), "--task", "mmlu", "--permutations", "2",
                                      "--no-early-stop", "--wait", "--chat-template", "off", "--length-group", "4"])
    spec = track_spec(args)
    assert {k: spec[k] for k in ("permutations", "early_stop", "wait", "chat_template", "length_group")} == {
        "permutations": 2, "early_stop": False, "wait": True, "chat_template": "off", "length_group": 4}
    assert not {"limit", "steps", "backend", "engine_args", "skip_bad_rows"} & set(spec)
    # none given is passed on as None (off), not read as "not given" (the run's default: 0.5 on gsm8k)
    args = build_parser().parse_args(["track", str(tmp_path), "--task", "gsm8k", "--answer-share", "none"])
    spec = track_spec(args)
    assert spec["answer_share"] is None and "lr" not in spec
    (tmp_path / "checkpoint-1").mkdir()
    (tmp_path / "checkpoint-1" / "config.json").write_text("{}")
    jobs = parse_sweep(spec, tmp_path / "track", command="track").jobs
    assert {(j.config.answer_share, j.config.lr) for j in jobs} == {(None, 0.3)}
