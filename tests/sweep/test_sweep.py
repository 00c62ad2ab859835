"""`softeval sweep` on one shared local Ray cluster, with tiny random models saved to folders in the test
and task files the workers read: every run folder and the report written; a rerun changes nothing; a
worker killed or a node removed mid-job is retried and resumes; a job that raises is reported; bad sweep
files are one line and exit 2 before any job starts."""

from __future__ import annotations

import io
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml
from sweepfiles import write_tasks
from tiny import tiny_lm, tiny_model, tiny_tokenizer, toy_config

from softeval import cli
from softeval.run.config import RunConfig
from softeval.run.pipeline import run_job
from softeval.store import index
from softeval.sweep.driver import run_sweep
from softeval.sweep.file import load_sweep

pytest.importorskip("ray")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

def write_model(folder: Path, seed: int) -> Path:
    tok = tiny_tokenizer()
    path = folder / f"tiny-{seed}"
    tiny_model(len(tok), seed=seed).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """Six tiny models (three base/post-trained pairs) and two task files, shared by the tests."""
    folder = tmp_path_factory.mktemp("sweep-assets")
    tasks = write_tasks(folder)
    models = [write_model(folder, seed) for seed in range(6)]
    return folder, models, tasks


SMALL = {"limit": 8, "steps": 4, "tokens": 2, "shots": 1, "batch_size": 4, "eval_batch_size": 8,
         "curve_every": 2, "curve_items": 4}


def one_error(err: str) -> str:
    """The one line printed: an error message, never wrapped."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def write_sweep(folder: Path, spec: dict, name: str = "sweep.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def pairs_spec(assets, out: Path) -> dict:
    folder, models, tasks = assets
    entries = []
    for i in range(3):
        base, post = models[2 * i], models[2 * i + 1]
        entries.append({"name": str(base), "kind": "base", "post_trained": str(post)})
        entries.append({"name": str(post), "kind": "post-trained"})
    return {"out": str(out), "models": entries, "tasks": [str(folder / t) for t in tasks],
            "methods": ["zero-shot", "soft-prompt"], **SMALL}


def snapshot(folder: Path) -> dict[str, tuple[float, bytes]]:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_sweep_of_three_pairs_writes_every_run_then_a_rerun_changes_nothing(ray_cluster, assets, tmp_path,
                                                                             monkeypatch, capsys):
    out = tmp_path / "out"
    path = write_sweep(tmp_path, pairs_spec(assets, out))

    assert cli.main(["sweep", str(path)]) == 0

    runs = index.list_runs(out)
    assert len(runs) == 24
    assert {(r["task"].rsplit("/", 1)[-1], r["method"]) for r in runs} == {
        (t, m) for t in ("first.yaml", "last.yaml") for m in ("zero-shot", "soft-prompt")}
    assert len(list(out.glob("tiny-*/*/*/seed0/results.json"))) == 24 and not list(out.rglob("*.partial"))
    compare = json.loads((out / "compare.json").read_text())
    assert len(compare["pairs"]) == 3 and {r["method"] for r in compare["results"]} == {"zero-shot", "soft-prompt"}
    report = (out / "report.html").read_text()
    assert "<html" in report and "Skipped" not in report  # compare.json, report.html: not taken for runs
    printed = capsys.readouterr()
    assert "24 done" in printed.err and str(out / "report.html") in printed.err
    first = json.loads(next(out.glob("tiny-0/first.yaml/soft-prompt/seed0/results.json")).read_text())
    same = RunConfig(model=str(assets[1][0]), task=str(assets[0] / "first.yaml"), methods=("soft-prompt",),
                     out=str(out), kind="base", **SMALL)
    assert first["config"] == same.options("soft-prompt")  # exactly the config `softeval run` builds

    before = snapshot(out)
    monkeypatch.setattr("softeval.sweep.driver._connect", lambda address: pytest.fail("a finished sweep started Ray"))
    assert cli.main(["sweep", str(path)]) == 0
    assert snapshot(out) == before
    assert "nothing to run, no model loaded" in capsys.readouterr().err


def _kill_when(path: Path, pid_box: dict, sig=signal.SIGKILL) -> threading.Thread:
    def watch():
        deadline = time.time() + 120
        while time.time() < deadline and not path.exists():
            time.sleep(0.01)
        os.kill(pid_box["pid"], sig)
        pid_box["killed"] = True

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_worker_killed_mid_job_is_retried_and_resumes_to_the_same_results(ray_cluster, assets, tmp_path):
    folder, models, tasks = assets
    long = {**SMALL, "steps": 40, "curve_every": 2, "early_stop": False}  # every step, to be killed mid-way
    spec = {"out": str(tmp_path / "out"), "models": [{"name": str(models[0]), "kind": "base"}],
            "tasks": [str(folder / tasks[0])], "methods": ["soft-prompt"], **long}
    sweep = load_sweep(write_sweep(tmp_path, spec))
    partial = sweep.out / "tiny-0" / "first.yaml" / "soft-prompt" / "seed0.partial" / "tune_state.json"
    box, events = {}, []

    def on_event(kind, state, info):
        events.append((kind, info.get("pid")))
        if kind == "running" and "thread" not in box:
            box["pid"] = info["pid"]
            box["thread"] = _kill_when(partial, box)

    result = run_sweep(sweep, on_event=on_event)

    assert box.get("killed") and [k for k, _ in events] == ["running", "retry", "running", "done"]
    assert events[2][1] != box["pid"]  # a fresh worker process
    state = result.states[0]
    assert state.state == "done" and state.retries == 1 and not result.failed
    run = sweep.out / "tiny-0" / "first.yaml" / "soft-prompt" / "seed0"
    resumed = json.loads((run / "results.json").read_text())
    assert resumed["tuning"]["resumed_at_steps"] and resumed["tuning"]["steps_run"] == 40

    from softeval.lm.models import load_model

    config = RunConfig(model=str(models[0]), task=str(folder / tasks[0]), methods=("soft-prompt",),
                       out=str(tmp_path / "ref"), kind="base", **long)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the worker (cpus: 1); a second thread only spins on a busy machine
    try:
        reference = run_job(config, lm=load_model(str(models[0]), kind="base"))[0]
    finally:
        torch.set_num_threads(threads)
    assert resumed["metrics"] == reference["metrics"]
    ref_run = tmp_path / "ref" / "tiny-0" / "first.yaml" / "soft-prompt" / "seed0"
    assert (run / "samples.jsonl").read_text() == (ref_run / "samples.jsonl").read_text()


def test_job_that_raises_fails_one_whose_run_is_locked_is_elsewhere_and_the_others_finish(ray_cluster, assets,
                                                                                          tmp_path, capsys):
    from softeval.run.pipeline import run_folder

    folder, models, tasks = assets
    spec = {"out": str(tmp_path / "out"), "models": [{"name": str(models[0]), "kind": "base"}],
            "tasks": [str(folder / tasks[0]), {"name": str(folder / tasks[1]), "limit": 500}],
            "methods": ["zero-shot", "soft-prompt"], **SMALL}
    path = write_sweep(tmp_path, spec)
    locked = next(j for j in load_sweep(path).jobs if j.method == "soft-prompt")

    with run_folder(locked.config, "soft-prompt")[0].lock():  # as a `softeval run` writing it would
        assert cli.main(["sweep", str(path)]) == 1

    err = " ".join(capsys.readouterr().err.split())
    assert "limit: 500 is larger than the 20 scored items" in err  # named as the sweep file names it
    assert f"being written by pid {os.getpid()}" in err, err
    run = tmp_path / "out" / "tiny-0" / "first.yaml"
    assert (run / "zero-shot" / "seed0" / "results.json").is_file() and not (run / "soft-prompt" / "seed0").exists()
    assert not (tmp_path / "out" / "tiny-0" / "last.yaml" / "zero-shot" / "seed0").exists()
    assert "1 done, 1 elsewhere, 2 failed" in err  # the locked run is the other writer's, not a failure


def test_node_removed_mid_sweep_its_jobs_finish_on_the_other_node(ray_cluster, assets, tmp_path):
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    folder, models, tasks = assets
    # Hold one of the head's two CPUs, so of two one-CPU workers one must run on the new node.
    hold = placement_group([{"CPU": 1}])
    ray.get(hold.ready())
    node = ray_cluster.add_node(num_cpus=1)
    spec = {"out": str(tmp_path / "out"), "tasks": [str(folder / tasks[0])], "methods": ["soft-prompt"],
            "models": [{"name": str(m), "kind": "base"} for m in models[:2]], **SMALL, "steps": 20}
    sweep = load_sweep(write_sweep(tmp_path, spec))
    seen = []

    def on_event(kind, state, info):
        seen.append((kind, state.job.model.label, info.get("node_id")))
        if kind == "running" and info.get("node_id") == node.node_id and len(seen) == len(set(seen)):
            threading.Thread(target=ray_cluster.remove_node, args=(node,), daemon=True).start()

    try:
        result = run_sweep(sweep, on_event=on_event)
    finally:
        remove_placement_group(hold)

    moved = [label for kind, label, node_id in seen if kind == "running" and node_id == node.node_id]
    assert len(moved) == 1, seen  # one model's worker ran on the second node, which was removed under it
    assert [s.state for s in result.states] == ["done", "done"]
    assert [s.retries for s in result.states if s.job.model.label == moved[0]] == [1]
    assert ("running", moved[0], ray_cluster.head_node.node_id) in seen


@pytest.mark.parametrize("change, message", [
    ({"modles": []}, "unknown key 'modles' (did you mean 'models'?)"),
    ({"models": [{"name": "no-such-model"}]}, "unknown model 'no-such-model'"),
    ({"tasks": ["no_such_task"]}, "unknown task 'no_such_task'"),
    ({"models": [{"name": "m", "resourcs": {}}]}, "model m: unknown key 'resourcs'"),
    ({"steps": "ten"}, "'steps' must be a whole number"),
    ({"methods": ["two-shot"]}, "unknown method 'two-shot'"),
    ({"chat-template": "on"}, "unknown key 'chat-template' (did you mean 'chat_template'?)"),
    ({"models": [{"name": "gemma-3-270m", "resources": {"gpus": 1.5}}]}, "gpus above 1 must be a whole number"),
    ({"models": [{"name": "gemma-3-270m", "resources": {"cpus": -1}}]}, "resources.cpus must be a finite number >= 0"),
    ({"models": [{"name": "gemma-3-270m", "resources": {"gpus": float("nan")}}]},
     "resources.gpus must be a finite number"),
    ({"models": [{"name": "gemma-3-270m", "resources": {"cpus": 0}}]},
     "resources.cpus 0 reserves no CPU, so nothing bounds how many workers run at once"),
    ({"models": [{"name": "gemma-3-270m", "resources": {"cpus": 0, "gpus": 0}}]}, "resources.cpus 0 reserves no CPU"),
    ({"models": [{"name": "gemma-3-270m", "resources": {"memory_gb": float("inf")}}]},
     "resources.memory_gb must be a finite number >= 0"),
    ({"seeds": ["0"]}, "'seeds' must be distinct whole numbers"),
    ({"limit": 0}, "'limit' must be between 1 and"),  # named as the file names it
    ({"models": ["gemma-3-270m", "gemma-3-270m"]}, "a model is listed twice"),
    ({"models": []}, "'models' must be a non-empty list"),
    ({"tasks": ["mmlu", "mmlu"]}, "a task is listed twice"),
    ({"models": [{"name": "gemma-3-270m", "post_trained": "nobody"}]}, "post_trained 'nobody' is not another model"),
    ({"retries": -1}, "'retries' must be a whole number >= 0"),
    ({"out": 5}, "'out' must name a folder"),
    ({"tasks": ["missing.yaml"]}, "task file not found"),
    ({"source": "missing.jsonl"}, "missing.jsonl: data file not found (give offline, hub or a data file)"),
    ({"tasks": [{"name": "mmlu", "source": "data/"}]}, "/data: data file not found"),
])
def test_bad_sweep_files_are_one_line_and_exit_2(tmp_path, capsys, change, message):
    spec = {"out": "out", "models": ["gemma-3-270m"], "tasks": ["mmlu"], **change}
    path = write_sweep(tmp_path, spec)
    assert cli.main(["sweep", str(path)]) == 2
    err = one_error(capsys.readouterr().err)
    assert message in err and str(path) in err, err
    assert not (tmp_path / "out").exists()


def test_cpus_0_is_allowed_where_a_gpu_bounds_the_workers(tmp_path):
    from softeval.sweep.file import parse_sweep

    spec = {"out": "out", "models": [{"name": "gemma-3-270m", "resources": {"cpus": 0, "gpus": 0.5}}],
            "tasks": ["mmlu"]}
    assert parse_sweep(spec, tmp_path / "s.yaml").models[0].resources.cpus == 0


@pytest.mark.parametrize("text, message", [
    ("out: o\nmodels: [gemma-3-270m]\ntasks: [mmlu]\nsteps: 5\nsteps: 80\n", "key 'steps' is given twice (line 5)"),
    ("", "expected a mapping"),
    ("- gemma-3-270m\n", "expected a mapping"),
    ("models: [gemma-3-270m\n", "not valid YAML"),
    ("out: o\nmodels: [gemma-3-270m]\ntasks: [mmlu]\nlimit: !!python/object:os.system x\n", "not valid YAML"),
])
def test_hostile_sweep_files_are_one_line_and_exit_2(tmp_path, capsys, text, message):
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    assert cli.main(["sweep", str(path)]) == 2
    err = one_error(capsys.readouterr().err)
    assert message in err and str(path) in err, err


def test_a_folder_as_sweep_file_two_models_with_one_folder_name_and_a_dead_address_exit_2(tmp_path, capsys,
                                                                                          monkeypatch):
    assert cli.main(["sweep", str(tmp_path)]) == 2
    assert "is not a file" in one_error(capsys.readouterr().err)

    for side in ("a", "b"):
        (tmp_path / side / "final").mkdir(parents=True)
        (tmp_path / side / "final" / "config.json").write_text("{}")  # a model folder, as far as the checks see
    spec = {"out": "out", "models": ["a/final", "b/final"], "tasks": ["mmlu"]}
    assert cli.main(["sweep", str(write_sweep(tmp_path, spec))]) == 2
    assert "models 'a/final' and 'b/final' would write the same run folders (final/...)" in one_error(
        capsys.readouterr().err)

    spec = {"out": "out", "models": ["gemma-3-270m"], "tasks": ["mmlu"]}
    path = write_sweep(tmp_path, spec)
    assert cli.main(["sweep", str(path), "--max-parallel", "0"]) == 2
    assert "--max-parallel must be at least 1" in one_error(capsys.readouterr().err)
    started = time.time()
    assert cli.main(["sweep", str(path), "--address", "127.0.0.1:1"]) == 2
    assert "--address 127.0.0.1:1: no Ray cluster answers there" in one_error(capsys.readouterr().err)
    assert time.time() - started < 60  # Ray itself would keep retrying for minutes
    assert not (tmp_path / "out").exists()


def test_a_finished_run_with_other_settings_in_out_stops_the_sweep_before_ray(tmp_path, capsys, monkeypatch):
    from runfactory import write_run

    write_run(tmp_path / "out", "gemma-3-270m", "mmlu", "zero-shot", [True, False])
    monkeypatch.setattr("softeval.sweep.driver._connect", lambda address: pytest.fail("started Ray"))
    path = write_sweep(tmp_path, {"out": "out", "models": ["gemma-3-270m"], "tasks": ["mmlu"]})
    assert cli.main(["sweep", str(path)]) == 2
    err = one_error(capsys.readouterr().err)
    assert "a finished run with other settings is at" in err
    assert "--force" not in err and "Set another 'out' in the sweep file" in err  # a fix a sweep has


def test_a_worker_finding_a_run_with_other_settings_suggests_its_commands_fix(tmp_path):
    """The worker checks again before it runs a job (another process may have written it since): its error
    names a fix of the command in use, never `softeval run`'s --force."""
    from runfactory import write_run

    from softeval.run.config import RunConfig
    from softeval.sweep.worker import SweepWorker

    run = write_run(tmp_path / "out", "gemma-3-270m", "mmlu", "zero-shot", [True, False])
    config = RunConfig(model="gemma-3-270m", task="mmlu", methods=("zero-shot",), out=str(tmp_path / "out"))
    results = json.loads((run / "results.json").read_text())
    results["config"] = {**config.options("zero-shot"), "limit": 2}
    (run / "results.json").write_text(json.dumps(results))
    answer = SweepWorker().run(config, str(tmp_path / "log"), "track")
    assert "a finished run with other settings" in answer["error"] and "--force" not in answer["error"]
    assert "Pass --out to write elsewhere or --name" in answer["error"]


def test_a_job_whose_worker_dies_more_often_than_its_retries_is_failed(ray_cluster, assets, tmp_path):
    folder, models, tasks = assets
    spec = {"out": str(tmp_path / "out"), "models": [{"name": str(models[0]), "kind": "base"}],
            "tasks": [{"name": str(folder / tasks[1]), "steps": 4}, str(folder / tasks[0])],
            "methods": ["soft-prompt"], "retries": 0, **SMALL, "steps": 40}
    sweep = load_sweep(write_sweep(tmp_path, spec))
    partial = sweep.out / "tiny-0" / "first.yaml" / "soft-prompt" / "seed0.partial"
    box = {}

    def on_event(kind, state, info):
        if kind == "running" and "first" in state.job.config.task and "thread" not in box:
            box["pid"] = info["pid"]
            box["thread"] = _kill_when(partial / "tune_state.json", box)

    result = run_sweep(sweep, on_event=on_event)

    done, killed = result.states
    assert killed.state == "failed" and "its worker died 1 times" in killed.error, killed.error
    assert done.state == "done" and killed.retries == 1
    assert (partial / "tune_state.json").is_file()  # kept: the next run of the sweep resumes it


def test_more_gpus_than_the_cluster_has_and_an_unwritable_out_stop_before_any_job(ray_cluster, assets, tmp_path,
                                                                                 capsys):
    folder, models, tasks = assets
    spec = {"out": str(tmp_path / "out"), "tasks": [str(folder / tasks[0])], "methods": ["zero-shot"],
            "models": [{"name": str(models[0]), "resources": {"gpus": 2}}], **SMALL}
    assert cli.main(["sweep", str(write_sweep(tmp_path, spec))]) == 2
    err = one_error(capsys.readouterr().err)
    assert "asks for 2 GPU(s) (the largest node has 0)" in err, err
    assert not (tmp_path / "out").exists()

    (tmp_path / "file").write_text("not a folder")
    spec = {**spec, "out": str(tmp_path / "file" / "out"), "models": [str(models[0])]}
    assert cli.main(["sweep", str(write_sweep(tmp_path, spec))]) == 2
    err = one_error(capsys.readouterr().err)
    assert "file is a file, not a folder" in err, err


def test_dry_run_lists_jobs_and_resources_and_loads_nothing(assets, tmp_path, capsys, monkeypatch):
    folder, models, tasks = assets
    spec = pairs_spec(assets, tmp_path / "out")
    spec["models"][0]["resources"] = {"gpus": 0.25, "cpus": 1}
    spec["models"][0]["methods"] = ["zero-shot"]
    monkeypatch.setattr("softeval.sweep.driver._connect", lambda address: pytest.fail("a dry run started Ray"))
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(["sweep", str(write_sweep(tmp_path, spec)), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "22 runs" in out and "22 to do" in out and "gpus 0.25" in out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("out", ["file", "run folder"])
def test_a_dry_run_refuses_the_output_root_the_sweep_refuses(assets, tmp_path, capsys, monkeypatch, out):
    """`out:` a file (or inside a run folder) is refused by the dry run as by the sweep (one check: plan's), not
    planned as "N to do"."""
    folder, models, tasks = assets
    if out == "file":
        (tmp_path / "file").write_text("not a folder")
        root, said = tmp_path / "file", "is a file, not a folder"
    else:
        run = tmp_path / "runs" / "m" / "t" / "zero-shot" / "seed0"
        run.mkdir(parents=True)
        (run / "results.json").write_text("{}")
        root, said = run / "out", "is inside a run folder"
    spec = {"out": str(root), "tasks": [str(folder / tasks[0])], "methods": ["zero-shot"],
            "models": [str(models[0])], **SMALL}
    monkeypatch.setattr("softeval.sweep.driver._connect", lambda address: pytest.fail("the sweep started Ray"))
    for dry in (["--dry-run"], []):
        assert cli.main(["sweep", str(write_sweep(tmp_path, spec)), *dry]) == 2
        err = one_error(capsys.readouterr().err)
        assert said in err, err


def test_the_example_sweep_parses_and_the_docs_list_every_option():
    from softeval.run.config import SWEEP_OPTIONS

    root = Path(__file__).parents[2]
    sweep = load_sweep(root / "examples" / "sweeps" / "packaged.yaml")
    assert len(sweep.jobs) == 12 and {j.config.task for j in sweep.jobs} == {"mmlu", "arc_easy"}
    docs = (root / "docs" / "reference" / "sweeps.md").read_text()
    assert all(f"`{key}`" in docs for key in SWEEP_OPTIONS)


def test_a_run_another_process_finished_while_the_job_waited_is_reported_skipped_not_done(ray_cluster, assets,
                                                                                         tmp_path):
    """Two sweeps (or a sweep and `softeval run`) on one out: the job that waited for the other writer
    (`wait: true`) and then found the run finished must not count it as a result of its own."""
    import shutil

    from softeval.lm.models import load_model
    from softeval.run.pipeline import run_folder

    folder, models, tasks = assets
    spec = {"out": str(tmp_path / "out"), "models": [{"name": str(models[0]), "kind": "base"}],
            "tasks": [str(folder / tasks[0])], "methods": ["zero-shot"], "wait": True, **SMALL}
    sweep = load_sweep(write_sweep(tmp_path, spec))
    [job] = sweep.jobs
    run_job(replace(job.config, out=str(tmp_path / "other")), lm=load_model(str(models[0]), kind="base"))
    done_elsewhere = run_folder(replace(job.config, out=str(tmp_path / "other")), "zero-shot")[0].final
    target = run_folder(job.config, "zero-shot")[0]
    log = sweep.out / ".sweep" / "logs" / "tiny-0.log"
    locked = threading.Event()

    def other_writer():  # holds the run lock until the sweep's worker waits for it, then finishes the run
        with target.lock():
            locked.set()
            deadline = time.time() + 120
            while time.time() < deadline and "waiting (--wait)" not in (log.read_text() if log.exists() else ""):
                time.sleep(0.05)
            shutil.copytree(done_elsewhere, target.final)

    thread = threading.Thread(target=other_writer, daemon=True)
    thread.start()
    locked.wait(30)
    result = run_sweep(sweep)
    thread.join(30)

    assert [s.state for s in result.states] == ["skipped"], [(s.state, s.error) for s in result.states]



def test_yaml_merge_keys_share_options_and_an_explicit_key_overrides_the_merged_one(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    models = ("models:\n  - &small {name: gemma-3-270m, steps: 5, limit: 3}\n"
              "  - {<<: *small, name: smollm2-135m-instruct, steps: 9}\n")
    path.write_text("out: out\ntasks: [mmlu]\nmethods: [soft-prompt]\n" + models)
    sweep = load_sweep(path)
    assert [(j.model.label, j.config.steps, j.config.limit) for j in sweep.jobs] == [
        ("gemma-3-270m", 5, 3), ("smollm2-135m-instruct", 9, 3)]
    path.write_text("out: out\ntasks: [mmlu]\n" + models.replace("steps: 9}", "steps: 9, steps: 10}"))
    assert cli.main(["sweep", str(path)]) == 2  # a key given twice beside a merge is still refused
    assert "key 'steps' is given twice" in one_error(capsys.readouterr().err)


def test_a_model_that_fails_to_load_is_logged_once_and_not_loaded_again_for_each_job(toy, tmp_path, monkeypatch):
    """A worker whose model fails to load writes the traceback to its log and reports the cause; the
    next jobs of that model get the same error without another load (a 70B model failing late would
    otherwise cost a load per job); another model is loaded as usual."""
    from softeval.run import pipeline
    from softeval.sweep.worker import SweepWorker

    loads: list[str] = []

    def load_lm(config):
        loads.append(config.model)
        if config.model == "broken":
            raise ValueError("Unrecognized model in broken/config.json")
        return tiny_lm()

    monkeypatch.setattr(pipeline, "load_lm", load_lm)
    worker, log = SweepWorker(), tmp_path / "logs" / "broken.log"
    answers = [worker.run(toy_config(tmp_path / "out", model="broken", methods=(m,)), str(log))
               for m in ("zero-shot", "few-shot")]
    assert loads == ["broken"]
    assert answers[0]["error"] == answers[1]["error"]
    assert "did not load" in answers[0]["error"] and "Unrecognized model" in answers[0]["error"]
    assert "Traceback" in log.read_text() and "ValueError" in log.read_text()
    good = worker.run(toy_config(tmp_path / "out", methods=("zero-shot",)), str(tmp_path / "logs" / "good.log"))
    assert "error" not in good and loads == ["broken", "tiny-0"]


def test_worker_messages_fit_the_sweep_command(toy, tmp_path, monkeypatch):
    """A run found finished inside a sweep job says how a sweep user redoes it (a sweep has no --force),
    and a user error reaches the sweep table whole (its fix is at the end); a foreign error is cut."""
    from softeval.errors import UserError
    from softeval.run import pipeline
    from softeval.sweep.worker import FOREIGN_ERROR_CHARS, SweepWorker, error_line

    monkeypatch.setattr(pipeline, "load_lm", lambda config: tiny_lm())
    config = toy_config(tmp_path / "out", methods=("zero-shot",))
    run_job(config, lm=tiny_lm())
    monkeypatch.setattr(pipeline, "is_finished", lambda config, method: False)  # as if finished meanwhile
    log = tmp_path / "logs" / "job.log"
    assert SweepWorker().run(config, str(log), "sweep")["skipped"] is True
    assert "skipped (remove its folder to redo)" in log.read_text() and "--force" not in log.read_text()
    # what only the worker can check (its device) is named as the sweep file names it, not by a flag
    wrong = SweepWorker().run(toy_config(tmp_path / "out2", methods=("zero-shot",), device="cuda"),
                              str(tmp_path / "logs" / "cuda.log"), "sweep")
    assert "device: cuda: this torch is built without CUDA; use device: cpu (or auto)" in wrong["error"], wrong
    many = SweepWorker().run(toy_config(tmp_path / "out2", methods=("zero-shot",), limit=10_000),
                             str(tmp_path / "logs" / "many.log"), "sweep")
    assert many["error"].startswith("limit: 10000 is larger than the ") and "; use limit: " in many["error"], many
    long_fix = "a finished run with other settings is at X (" + "a; " * 300 + "). Set another 'out'."
    assert error_line(UserError(long_fix)).endswith("Set another 'out'.")
    cut = error_line(RuntimeError("x" * 2000))
    assert len(cut) == FOREIGN_ERROR_CHARS and cut.startswith("RuntimeError: xxx") and cut.endswith("…")


def _ray_start_head(tmp_path: Path, env: dict) -> tuple[subprocess.Popen, int]:
    """`ray start --head --block` on 127.0.0.1 (one CPU, no dashboard), once it is up: the process, its port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "head.log"
    head = subprocess.Popen([str(Path(sys.executable).with_name("ray")), "start", "--head", "--block",
                             f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
                             "--include-dashboard=false", "--disable-usage-stats"],
                            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 90
    while "block forever" not in log.read_text():
        assert head.poll() is None and time.time() < deadline, log.read_text()
        time.sleep(0.2)
    return head, port


JOIN = """
import os, sys
from ray._raylet import AuthenticationTokenLoader
from softeval.errors import UserError
from softeval.sweep.driver import _connect
address, home, stranger = sys.argv[1:]
os.environ["HOME"] = stranger
try:
    _connect(address)
except UserError as err:
    print("refused:", err)
os.environ["HOME"] = home
AuthenticationTokenLoader.instance().reset_cache()
ray, _ = _connect(address)
print(ray.get(ray.remote(num_cpus=1)(lambda: "a task ran on").remote()), ray.cluster_resources()["CPU"], "CPU")
"""


@pytest.mark.slow
def test_the_sweep_joins_a_ray_start_cluster_with_token_authentication_by_host_port(tmp_path):
    """Ray's plain `ray start --head` turns token authentication on when the machine has a token
    (~/.ray/auth_token; a local sweep writes one). The sweep's `--address HOST:PORT` joins it with that
    token; a machine without it gets one line naming the fix (Ray would log Unauthenticated for 20 s).
    The driver's join in a child process (this one is joined to the suite's cluster); the sweep over a
    joined cluster is the other tests'."""
    pytest.importorskip("ray._raylet").AuthenticationTokenLoader  # noqa: B018 - a Ray with token authentication
    home, stranger = tmp_path / "home", tmp_path / "stranger"
    (home / ".ray").mkdir(parents=True)
    stranger.mkdir()
    (home / ".ray" / "auth_token").write_text(secrets.token_hex(32))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_")}, "HOME": str(home),
           "PYTHONPATH": str(Path(cli.__file__).resolve().parents[2]),
           "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}  # stopped at once, not after a 30 s drain
    head, port = _ray_start_head(tmp_path, env)
    try:
        joined = subprocess.run([sys.executable, "-c", JOIN, f"127.0.0.1:{port}", str(home), str(stranger)],
                                env=env, capture_output=True, text=True, timeout=300)
    finally:
        head.terminate()
        head.wait(timeout=60)
    assert joined.returncode == 0, joined.stderr[-3000:]
    assert joined.stdout.splitlines() == [
        f"refused: the Ray cluster at 127.0.0.1:{port} uses token authentication and this machine has no Ray "
        "token: copy the head node's ~/.ray/auth_token to this machine (or set RAY_AUTH_TOKEN to its content), "
        "see 'A Ray cluster' in docs/reference/sweeps.md",
        "a task ran on 1.0 CPU"], joined.stderr[-3000:]
    assert "Unauthenticated" not in joined.stderr


def test_a_folder_the_sweep_s_report_leaves_out_is_named_on_the_terminal(tmp_path):
    """A damaged run in a sweep's out (another run's, which no job of the sweep redoes) was named in report.html's
    skipped section only: the sweep's summary names it too, with why, as `softeval report` does."""
    from rich.console import Console
    from runfactory import outcomes, write_run

    from softeval.sweep.driver import SweepResult, _finish
    from softeval.sweep.view import SweepView

    write_run(tmp_path / "out", "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    damaged = write_run(tmp_path / "out", "model-b", "mmlu", "zero-shot", outcomes(10, 0.5))
    (damaged / "results.json").write_text((damaged / "results.json").read_text()[:40])
    sweep = load_sweep(write_sweep(tmp_path, {"out": "out", "models": ["gemma-3-270m"], "tasks": ["arc_easy"],
                                              "methods": ["zero-shot"]}))
    result, console = SweepResult([], 1.0), Console(file=io.StringIO(), width=400)
    _finish(sweep, result, True, console)
    [note] = result.notes
    assert note.startswith(f"skipped {damaged}: results.json is not valid JSON") and "left out of the report" in note
    SweepView(console, []).summary(result)
    assert f"note: skipped {damaged}: results.json is not valid JSON" in console.file.getvalue()
