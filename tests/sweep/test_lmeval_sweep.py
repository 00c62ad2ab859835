"""A sweep file names lm-eval tasks as strings, with an include path of its own per task."""

from __future__ import annotations

import pytest
from lmevalyamls import ADD, GROUP, MC, MC2, write_group, write_tasks

from softeval.errors import UserError
from softeval.sweep.file import load_sweep

pytest.importorskip("lm_eval")


def test_a_sweep_file_takes_lm_eval_tasks_and_their_include_path(tmp_path):
    folder = write_tasks(tmp_path / "yamls")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"models: [smollm2-135m-instruct]\nout: {tmp_path / 'runs'}\nlimit: 2\n"
                     f"tasks:\n  - name: lm-eval:{ADD}\n    include_path: {folder}\n")
    jobs = load_sweep(sweep).jobs
    assert {(j.config.task, j.config.include_path) for j in jobs} == {(f"lm-eval:{ADD}", str(folder))}
    sweep.write_text(f"models: [smollm2-135m-instruct]\nout: {tmp_path / 'runs'}\n"
                     f"tasks:\n  - name: lm-eval:no_such_toy\n    include_path: {folder}\n")
    with pytest.raises(UserError, match="unknown lm-eval task 'no_such_toy'"):
        load_sweep(sweep)


def test_a_relative_include_path_is_the_sweep_files_folder_at_any_level(tmp_path, monkeypatch):
    folder = write_tasks(tmp_path / "sweeps" / "yamls")
    sweep = tmp_path / "sweeps" / "sweep.yaml"
    monkeypatch.chdir(tmp_path)  # elsewhere than the file's folder
    for text in (f"tasks:\n  - name: lm-eval:{ADD}\n    include_path: yamls\n",
                 f"include_path: yamls\ntasks: [lm-eval:{ADD}]\n"):
        sweep.write_text(f"models: [smollm2-135m-instruct]\nout: runs\nlimit: 2\n{text}")
        jobs = load_sweep(sweep).jobs
        assert {j.config.include_path for j in jobs} == {str(folder)}


def test_a_group_is_its_subtasks_and_its_record(tmp_path):
    folder = write_group(tmp_path / "yamls")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"models: [smollm2-135m-instruct]\nout: runs\nlimit: 2\nmethods: [zero-shot]\n"
                     f"include_path: yamls\ntasks: [lm-eval:{GROUP}]\n")
    loaded = load_sweep(sweep)
    assert [t.name for t in loaded.tasks] == [f"lm-eval:{MC}", f"lm-eval:{MC2}"]
    assert [j.config.task for j in loaded.jobs] == [f"lm-eval:{MC}", f"lm-eval:{MC2}"]
    [record] = loaded.groups
    assert (record["name"], record["tasks"], record["include_path"]) == (GROUP, [MC, MC2], str(folder))
    assert not (tmp_path / "runs").exists()  # written when the sweep runs, after its checks
