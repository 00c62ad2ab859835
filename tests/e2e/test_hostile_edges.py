"""Edges a hostile user finds (issue 24, probes e-i): duplicate item ids, YAML alias bombs and values too
long to echo, a hand-edited results.json, a deleted soft_prompt/, a null field, a bool option given text,
SIGTERM during tuning, and a sweep job that another process is writing. (--permutations beyond the
orders that exist: test_knowledge.py.)"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import time
from pathlib import Path

import pytest
from runfactory import outcomes, write_run
from test_runlock import child, wait_for_line
from tiny import tiny_lm, toy_config

from softeval import cli
from softeval.errors import SHOWN_CHARS, UserError, shown
from softeval.run.pipeline import run_folder, run_job
from softeval.run.validate import check_config
from softeval.store import index
from softeval.store.format import scan
from softeval.store.runs import RunFolder
from softeval.sweep.driver import JobState, SweepResult
from softeval.sweep.file import load_sweep
from softeval.sweep.view import SweepView
from softeval.tasks.custom import load_task_file
from softeval.tasks.data import require_fields
from softeval.yamlfile import MAX_ALIASED, MAX_BYTES

TASK_SPEC = 'data: rows.jsonl\nprompt: "Q: {{ q }}\\nA:"\nanswer_field: a\nanswer_regex: "(\\\\w+)"\nid_field: id\n'


def _task_file(tmp_path: Path, rows: list[dict], extra: str = "") -> Path:
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / "task.yaml"
    path.write_text(TASK_SPEC + extra)
    return path


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


# ---- e. duplicate item ids ---------------------------------------------------------------------------

def test_duplicate_item_ids_are_an_error_naming_the_id_and_both_rows(tmp_path):
    rows = [{"id": "same" if i in (1, 3) else f"q{i}", "q": f"q{i}", "a": "x"} for i in range(6)]
    task = load_task_file(_task_file(tmp_path, rows))
    with pytest.raises(UserError, match=r"rows\.jsonl: rows 1 and 3 have the same id 'same'"):
        task.load()
    with pytest.raises(UserError, match="rows 1 and 3"):  # not a bad row to skip: which of the two is the item?
        task.load(skip_bad_rows=True)
    rows[3]["id"] = "q3"
    _task_file(tmp_path, rows)
    splits = task.load()
    assert sorted(e.id for e in splits.tune + splits.eval) == ["q0", "q2", "q3", "q4", "q5", "same"]


def test_a_run_whose_items_share_an_id_is_read_by_nothing_downstream(tmp_path, capsys):
    """A run written before ids were checked (four items all 'same'): compare would key them into one
    item, so every reader skips the run, saying why."""
    write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(4, 0.5), ids=["same"] * 4)
    report = scan(tmp_path)
    assert report.runs == []
    assert "rows 1 and 2 are both item 'same'" in report.skipped[0][1]
    assert cli.main(["runs", str(tmp_path)]) == 0
    assert "0 finished runs" in capsys.readouterr().out


# ---- f. YAML alias bombs, and values too long to echo ---------------------------------------------

def _bomb(levels: int) -> str:
    """A flow list of ``levels`` nested anchors, each nine aliases of the one before: 9**levels values."""
    parts = ['&x0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    parts += [f"&x{i} [{', '.join([f'*x{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


def test_a_task_file_alias_bomb_is_refused_before_anything_is_built(tmp_path):
    path = _task_file(tmp_path, [{"id": "1", "q": "a", "a": "x"}], f"stop: {_bomb(9)}\n")
    assert path.stat().st_size < 2000
    started = time.perf_counter()
    with pytest.raises(UserError) as err:
        load_task_file(path)
    assert time.perf_counter() - started < 1.0  # was 92.5 s and 5.86 GB
    assert f"its aliases repeat more than {MAX_ALIASED} values" in str(err.value) and len(str(err.value)) < 300


def test_a_sweep_file_alias_bomb_is_one_short_line(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(f"out: out\nmodels: [gemma-3-270m]\ntasks: [mmlu]\nlimit: {_bomb(6)}\n")
    started = time.perf_counter()
    assert cli.main(["sweep", str(path), "--dry-run"]) == 2
    assert time.perf_counter() - started < 1.0
    err = _error(capsys)
    assert "aliases repeat more than" in err and len(err) < 300  # was a 39 MB line


def test_an_alias_inside_its_own_anchor_and_an_oversized_file_are_refused(tmp_path):
    path = _task_file(tmp_path, [{"id": "1", "q": "a", "a": "x"}], "stop: &loop [a, *loop]\n")
    with pytest.raises(UserError, match=r"the alias \*loop is used inside its own anchor \(line 6\)"):
        load_task_file(path)
    path.write_text(TASK_SPEC + "stop: [&a lol, " + "*a, " * (MAX_BYTES // 4) + "lol]\n")
    started = time.perf_counter()
    with pytest.raises(UserError, match=rf"task\.yaml: \d+ bytes is more than the {MAX_BYTES} a settings file"):
        load_task_file(path)
    assert time.perf_counter() - started < 1.0  # a 50 MB alias file took 182 s


def test_a_few_aliases_still_work(tmp_path):
    path = _task_file(tmp_path, [{"id": str(i), "q": "a", "a": "x"} for i in range(3)],
                      "stop: &s [x, y]\ndescription: &d shared\nname: *d\n")
    task = load_task_file(path)
    assert task.stop == ("x", "y") and task.name == "shared"


def test_every_echoed_value_is_cut(tmp_path, capsys):
    assert len(shown("x" * 10**6)) <= SHOWN_CHARS + 3 and shown("abc") == "'abc'"
    huge = [list(range(10**5))] * 10**3  # shared rows: as cheap to show as a short list
    started = time.perf_counter()
    assert len(shown(huge)) <= SHOWN_CHARS + 3 and time.perf_counter() - started < 0.1
    path = tmp_path / "sweep.yaml"
    path.write_text(f"out: out\nmodels: [gemma-3-270m]\ntasks: [mmlu]\nlimit: {'9' * 5000}x\n")
    assert cli.main(["sweep", str(path), "--dry-run"]) == 2
    err = _error(capsys)
    assert "'limit' must be a whole number or null, not str '999" in err and len(err) < 300
    path = _task_file(tmp_path, [{"id": "1", "q": "a", "a": "x"}], f"matcher: {'m' * 5000}\n")
    with pytest.raises(UserError, match=r"matcher 'mmm+\.\.\.m+' is not one of") as err:
        load_task_file(path)
    assert len(str(err.value)) < 300


# ---- a bool option given text, a text option given a bool (library use) ----------------------------

@pytest.mark.parametrize(("field", "value", "message"), [
    ("early_stop", "no", "--early-stop must be true or false, not str 'no'"),
    ("skip_bad_rows", 1, "--skip-bad-rows must be true or false, not int 1"),
    ("chat_template", True, "--chat-template must be text, not bool True"),
    ("source", False, "--source must be text, not bool False"),
])
def test_a_run_config_of_the_wrong_type_is_refused_before_it_runs(tmp_path, toy, field, value, message):
    config = toy_config(tmp_path / "out", **{field: value})
    with pytest.raises(UserError, match=message):
        check_config(config, model_given=True)
    with pytest.raises(UserError, match=message):
        run_job(config, lm=tiny_lm())
    assert not (tmp_path / "out").exists()


def test_a_sweep_file_types_options_by_the_same_rule(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text('out: out\nmodels: [gemma-3-270m]\ntasks: [mmlu]\nearly_stop: "no"\n')
    assert cli.main(["sweep", str(path), "--dry-run"]) == 2
    assert "'early_stop' must be true or false, not str 'no'" in _error(capsys)


# ---- g. a hand-edited results.json -----------------------------------------------------------------

def test_a_hand_edited_results_json_is_damage_not_believed(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    run_dir = write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(4, 0.5))
    index.rebuild(tmp_path)  # indexed while intact: the listing must notice the edit
    results = json.loads((run_dir / "results.json").read_text())
    results["metrics"]["accuracy"]["value"] = 0.99
    (run_dir / "results.json").write_text(json.dumps(results))
    why = "results.json says metrics.accuracy.value is 0.99 (the samples give 0.5), not what its samples.jsonl gives"
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


# ---- h. a deleted soft_prompt/ ---------------------------------------------------------------------

def test_a_soft_prompt_run_without_its_adapter_is_damage(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    run_dir = write_run(tmp_path, "model-a", "mmlu", "soft-prompt", outcomes(4, 0.5))
    assert len(index.list_runs(tmp_path)) == 1
    shutil.rmtree(run_dir / "soft_prompt")
    skipped = []
    assert index.list_runs(tmp_path, on_skip=lambda path, why: skipped.append(why)) == []
    assert skipped == ["a soft-prompt run without its adapter (soft_prompt/adapter_model.safetensors is missing): "
                       "damaged (rerun it with `softeval run` and the same options)"]
    folder = RunFolder(tmp_path, run_dir)
    assert folder.check({}, force=False, log=lambda m: None) is False  # not skipped: tuned again
    assert not run_dir.exists()


# ---- i. the smaller ones ---------------------------------------------------------------------------

def test_a_null_field_is_named_as_null():
    with pytest.raises(UserError, match=r"^rows\.jsonl: row 3 has field\(s\) country set to null: give each a value$"):
        require_fields({"q": "x", "country": None}, ["q", "country"], "rows.jsonl", 3)
    with pytest.raises(UserError, match=r"row 3 lacks field\(s\) country \(has: q\)"):
        require_fields({"q": "x"}, ["q", "country"], "rows.jsonl", 3)


def test_sigterm_during_tuning_says_what_ctrl_c_says(tmp_path):
    said = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        flag = tmp_path / f"go-{sig}"
        proc = child(f"tune:2:pause={flag}", tmp_path / f"out-{sig}")
        wait_for_line(proc.stdout, "PAUSED")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        said[sig] = (proc.returncode, err.strip().splitlines()[-1])
    assert said[signal.SIGTERM] == (143, "interrupted: finished runs are kept; an unfinished tuning resumes next time")
    assert said[signal.SIGINT] == (130, said[signal.SIGTERM][1])
    assert list((tmp_path / f"out-{signal.SIGTERM}").rglob("seed0.partial"))  # its tuning resumes next time


def _hold(out: str, final: str, ready, release) -> None:
    from softeval.store.runs import RunFolder

    with RunFolder(Path(out), Path(final)).lock():
        ready.set()
        release.wait(60)


def test_a_sweep_job_another_process_writes_is_reported_as_such_not_failed(tmp_path, toy, monkeypatch):
    """Two sweeps of one file into one out: a job whose run the other sweep is writing is 'elsewhere',
    naming that process; the sweep counts no failure (exit 0) and says where the run is made."""
    from rich.console import Console

    from softeval.run import pipeline
    from softeval.sweep.worker import SweepWorker

    monkeypatch.setattr(pipeline, "load_lm", lambda config: tiny_lm())
    config = toy_config(tmp_path / "out", methods=("zero-shot",))
    folder = run_folder(config, "zero-shot")[0]
    ctx = mp.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(folder.out), str(folder.final), ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        answer = SweepWorker().run(config, str(tmp_path / "logs" / "tiny.log"))
    finally:
        release.set()
        holder.join(30)
    assert "error" not in answer
    assert answer["elsewhere"].startswith(f"pid {holder.pid} on {socket.gethostname()} since ")
    console = Console(file=open(os.devnull, "w"), width=300, record=True)
    job = type("Job", (), {"config": config, "method": "zero-shot",
                           "model": type("M", (), {"label": "tiny-0"})()})()
    state = JobState(job, folder.final, "running", started=time.time())
    view = SweepView(console, [state])
    view.elsewhere(state, answer["elsewhere"])
    result = SweepResult([state], 1.0)
    view.summary(result)
    text = console.export_text()
    assert result.failed == [] and state.state == "elsewhere"
    assert "1 elsewhere; 0 retried" in text and f"being written by pid {holder.pid}" in text
    assert "set `wait: true` to wait" in text


def test_the_sweep_file_loader_keeps_refusing_repeated_keys(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text("out: out\nmodels: [gemma-3-270m]\ntasks: [mmlu]\nsteps: 5\nsteps: 6\n")
    assert cli.main(["sweep", str(path), "--dry-run"]) == 2
    assert "key 'steps' is given twice (line 5)" in _error(capsys)
    path.write_text("out: out\nmodels: [gemma-3-270m]\ntasks: [mmlu]\nsteps: 5\n")
    assert load_sweep(path).jobs[0].config.steps == 5
