"""Reading a sweep file (softeval.sweep.file): its run options are typed by the same rule as a run's, and a
key given twice is refused, each as one line and exit 2 of `softeval sweep --dry-run`."""

from __future__ import annotations

import sys

from userfiles import one_line_error

from softeval import cli
from softeval.sweep import driver
from softeval.sweep.file import load_sweep


def test_a_sweep_file_types_options_by_the_same_rule(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text('out: out\nmodels: [gemma-3-270m]\ntasks: [mmlu]\nearly_stop: "no"\n')
    assert cli.main(["sweep", str(path), "--dry-run"]) == 2
    assert "'early_stop' must be true or false, not str 'no'" in one_line_error(capsys)


def test_the_sweep_file_loader_keeps_refusing_repeated_keys(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text("out: out\nmodels: [gemma-3-270m]\ntasks: [mmlu]\nsteps: 5\nsteps: 6\n")
    assert cli.main(["sweep", str(path), "--dry-run"]) == 2
    assert "key 'steps' is given twice (line 5)" in one_line_error(capsys)
    path.write_text("out: out\nmodels: [gemma-3-270m]\ntasks: [mmlu]\nsteps: 5\n")
    assert load_sweep(path).jobs[0].config.steps == 5


def test_backend_vllm_without_vllm_is_refused_before_ray_starts_in_the_file_s_spelling(tmp_path, capsys,
                                                                                      monkeypatch):
    """`backend: vllm` where vLLM does not import passed --dry-run and a real sweep started Ray, then
    failed in the worker naming --backend vllm. Ray on this machine (no --address) runs the workers here:
    `softeval run`'s refusal, before Ray starts; on a cluster (--address) each worker checks its own."""
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` fails, as where it is not installed
    path = tmp_path / "sweep.yaml"
    path.write_text("out: out\nmodels: [gemma-3-270m]\ntasks: [mmlu]\nmethods: [zero-shot]\nbackend: vllm\n")
    started = []
    monkeypatch.setattr(driver, "_connect", lambda address: started.append(address))
    assert cli.main(["sweep", str(path)]) == 2 and not started
    err = one_line_error(capsys)
    assert "backend: vllm needs vLLM, which is not installed" in err and "--backend" not in err
    assert cli.main(["sweep", str(path), "--dry-run"]) == 2
    assert "backend: vllm needs vLLM" in one_line_error(capsys)
    assert load_sweep(path, local=False).jobs[0].config.backend == "vllm"


def test_a_refusal_names_the_entry_the_key_is_written_in(tmp_path, capsys):
    """The sweep file's declaration (sweep/schema.py) checks each value where it is written: the one line names
    the file, the entry (by its name, else its place in the list) and the key as the file writes it."""
    path = tmp_path / "sweep.yaml"
    for text, said in [
        ("tasks: [{name: mmlu, steps: 0}]", "task mmlu: 'steps' must be between 1 and 1000000, not 0"),
        ("tasks: [{nam: mmlu}]", "tasks entry 1: unknown key 'nam' (did you mean 'name'?)"),
        ("tasks: [mmlu]\nmodels: [{name: m, resources: {gpus: 1.5}}]",
         "model m: resources.gpus above 1 must be a whole number, not 1.5"),
        ("tasks: [mmlu]\nmodels: [{name: m, resources: {cpu: 1}}]",
         "model m, resources: unknown key 'cpu' (did you mean 'cpus'?)"),
        ("tasks: [mmlu]\nmodels: [{series: ckpts, warm_start: yes}]", "series ckpts: warm_start must be previous or "
                                                                      "none, not True"),
    ]:
        models = "" if "models:" in text else "models: [gemma-3-270m]\n"
        path.write_text(f"out: out\n{models}{text}\n")
        assert cli.main(["sweep", str(path), "--dry-run"]) == 2
        assert one_line_error(capsys) == f"error: sweep file {path}, {said}"


def test_options_no_run_of_a_pair_uses_are_named_once_before_anything_runs(tmp_path, capsys):
    """As `softeval run` names the options it was given and does not use (validate.unused_note), a sweep names, once
    per task and before the plan, the keys written at any level that none of the pair's methods reads, and
    ``permutations`` on a task that is not multiple choice; an option some method reads is not named. A sweep
    refused by a later check says its one error line only."""
    path = tmp_path / "sweep.yaml"
    path.write_text("out: out\nmodels: [smollm2-135m-instruct, gemma-3-270m]\nmethods: [zero-shot, few-shot]\n"
                    "tasks: [gsm8k, {name: arc_easy, lora_rank: 4}]\nsteps: 40\npermutations: 2\nshots: 3\n")
    assert cli.main(["sweep", str(path), "--dry-run"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert notes == [
        f"note: sweep file {path}, task gsm8k: 'steps', 'permutations' have no effect on its runs ('steps': not read "
        "by methods zero-shot, few-shot; 'permutations': task gsm8k is not multiple choice)",
        f"note: sweep file {path}, task arc_easy: 'steps', 'lora_rank' have no effect on its runs ('steps', "
        "'lora_rank': not read by methods zero-shot, few-shot)"]
    path.write_text("out: out\nmodels: [smollm2-135m-instruct]\ntasks: [arc_easy]\nsteps: 40\npermutations: 2\n")
    assert cli.main(["sweep", str(path), "--dry-run"]) == 0
    assert "note:" not in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    path.write_text("out: file\nmodels: [smollm2-135m-instruct]\ntasks: [gsm8k]\nmethods: [zero-shot]\nsteps: 4\n")
    assert cli.main(["sweep", str(path), "--dry-run"]) == 2
    assert "is a file, not a folder" in one_line_error(capsys)  # the error alone: no note before it
