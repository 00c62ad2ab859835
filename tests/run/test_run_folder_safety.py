"""A run never loses or leaves behind a run folder it should not (run_job and the run folders): --force
replaces a finished run only with a complete one, an eval into the folder of the tuned run its soft
prompt comes from is refused, and a command refused under the run lock leaves no folder."""

from __future__ import annotations

import json

import pytest
from tiny import format_task, tiny_lm, toy_config

from softeval import tasks
from softeval.errors import UserError
from softeval.run import pipeline
from softeval.run.pipeline import run_job
from softeval.store.format import scan


def _config(out, **kw):
    return toy_config(out, **{**dict(limit=6, steps=2, shots=1, curve_every=1, eval_batch_size=6), **kw})


def test_eval_of_a_tuned_soft_prompt_into_its_own_run_is_refused_and_force_keeps_the_tuned_run(toy,
                                                                                              tmp_path):
    """The README's `softeval tune` then `softeval eval --soft-prompt runs/.../soft_prompt` on the same
    --out: the eval run's folder is the tuned run's. --force used to delete the tuned run (soft prompt
    included) and then fail to load the soft prompt it had just deleted."""
    run_job(_config(tmp_path, methods=("soft-prompt",)), lm=tiny_lm())
    run = tmp_path / "tiny-0/toyformat/soft-prompt/seed0"
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    for force in (False, True):
        with pytest.raises(UserError, match="belongs to the run .* --out"):
            run_job(_config(tmp_path, methods=("soft-prompt",), soft_prompt=str(run / "soft_prompt"),
                            force=force), lm=tiny_lm())
        assert sorted(p.relative_to(run) for p in run.rglob("*")) == before
    assert not list(tmp_path.rglob("*.partial"))
    scored = run_job(_config(tmp_path / "eval", methods=("soft-prompt",),
                             soft_prompt=str(run / "soft_prompt")), lm=tiny_lm())[0]
    assert scored["tuning"] == {"loaded_from": str(run / "soft_prompt")}


def test_force_replaces_the_finished_run_only_when_the_new_one_is_complete(toy, tmp_path, monkeypatch):
    """A --force rerun interrupted (Ctrl-C) before it finished used to have deleted the finished run
    already: now the old run stays until the new one replaces it."""
    first = run_job(_config(tmp_path, methods=("zero-shot",)), lm=tiny_lm())[0]
    run = tmp_path / "tiny-0/toyformat/zero-shot/seed0"

    def interrupted(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "score_items", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_job(_config(tmp_path, methods=("zero-shot",), limit=4, force=True), lm=tiny_lm())
    assert json.loads((run / "results.json").read_text())["finished_at"] == first["finished_at"]
    monkeypatch.undo()
    monkeypatch.setitem(tasks.TASKS, "toyformat", format_task())
    forced = run_job(_config(tmp_path, methods=("zero-shot",), limit=4, force=True), lm=tiny_lm())[0]
    assert forced["n"] == 4 and json.loads((run / "results.json").read_text())["n"] == 4
    assert [p.name for p in run.parent.iterdir()
            if p.name.startswith("seed") or "replaced" in p.name] == ["seed0"]


def test_a_command_refused_after_taking_the_run_lock_leaves_no_folder(toy, tmp_path):
    """A soft prompt of another model (refused once the model is known, under the run lock) used to
    leave <model>/<task>/soft-prompt/ behind, which runs/compare/report then listed as 'not a run
    folder'."""
    run_job(_config(tmp_path / "a", methods=("soft-prompt",)), lm=tiny_lm())
    sp = tmp_path / "a/tiny-0/toyformat/soft-prompt/seed0/soft_prompt"
    out = tmp_path / "b"
    out.mkdir()
    with pytest.raises(UserError, match="another model"):
        run_job(_config(out, model="tiny-1", methods=("soft-prompt",), soft_prompt=str(sp)),
                lm=tiny_lm(seed=1, hidden=16))
    assert list(out.iterdir()) == [] and scan(out).skipped == []
    run_job(_config(out, methods=("zero-shot",)), lm=tiny_lm())  # a run beside it keeps its folders
    assert [p.name for p in (out / "tiny-0/toyformat").iterdir()] == ["zero-shot"]
