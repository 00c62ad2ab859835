"""What a zero-shot run reads: not the seed, the tuning batch or the held-out slice's size, which pick the tuning
pool and the shots (methods.POOL_OPTIONS, read only by the methods whose spec names them: store.identity.reads). Its
outputs are the same under any of them, so they are not part of its identity: another tuning setting leaves a finished
zero-shot run finished, and a zero-shot run is paired with a soft prompt of another seed without "not judged"
(store.identity.setting_diff)."""

from __future__ import annotations

import json

from tiny import tiny_lm

from softeval.run.config import RunConfig
from softeval.run.pipeline import run_job
from softeval.store.identity import setting_diff

SETTINGS = ({"seed": 0, "curve_items": 16, "batch_size": 8}, {"seed": 5, "curve_items": 2, "batch_size": 2})


def _run(out, method="zero-shot", **kw):
    config = RunConfig(model="tiny-0", task="arc_easy", methods=(method,), limit=3, eval_batch_size=3, out=str(out),
                       device="cpu", **kw)
    return run_job(config, lm=tiny_lm())[0]


def _samples(out) -> list[dict]:
    (path,) = out.rglob("samples.jsonl")
    return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in path.read_text().splitlines()]


def test_zero_shot_outputs_do_not_depend_on_the_seed_or_the_tuning_pool(tmp_path):
    first, other = (_run(tmp_path / f"o{i}", **kw) for i, kw in enumerate(SETTINGS))
    assert _samples(tmp_path / "o0") == _samples(tmp_path / "o1")  # outputs, letters, log-likelihoods alike
    again = _run(tmp_path / "o0", **{**SETTINGS[1], "seed": 0})  # the same folder: finished, not run again
    assert again["started_at"] == first["started_at"]
    few = [_run(tmp_path / f"f{i}", method="few-shot", shots=1, **kw) for i, kw in enumerate(SETTINGS)]
    assert setting_diff(few[0]["config"], few[1]["config"]) != []  # the shots come from the pool: few-shot reads them


def test_a_zero_shot_run_pairs_with_a_soft_prompt_of_another_seed():
    zero = RunConfig(model="m", task="mmlu", seed=0, curve_items=8).options("zero-shot", here=False)
    soft = RunConfig(model="m", task="mmlu", seed=1).options("soft-prompt", here=False)
    few = RunConfig(model="m", task="mmlu", seed=0).options("few-shot", here=False)
    assert setting_diff(zero, soft) == []
    assert setting_diff(few, soft) == ["seed: 0 -> 1"]


def test_a_zero_shot_run_finished_under_another_seed_is_that_run_and_force_scores_it_again(tmp_path):
    import io

    from rich.console import Console

    from softeval.run.pipeline import is_finished

    def run(seed, methods=("zero-shot",), **kw):
        config = RunConfig(**{"model": "tiny-0", "task": "arc_easy", "methods": methods, "shots": 1, "limit": 3,
                              "eval_batch_size": 3, "out": str(tmp_path), "device": "cpu", "seed": seed, **kw})
        console = Console(file=io.StringIO(), width=300)
        return run_job(config, console=console, lm=tiny_lm()), console.file.getvalue(), config

    (zero,), _, _ = run(2)
    assert not is_finished(RunConfig(model="tiny-0", task="arc_easy", limit=3, eval_batch_size=3, out=str(tmp_path),
                                     device="cpu", seed=1), "few-shot")
    (again, few), said, config = run(1, ("zero-shot", "few-shot"))
    assert again == zero and few["seed"] == 1  # zero-shot: seed 2's run, found; few-shot reads the seed: its own
    assert "zero-shot: finished run found at" in said and "seed2 (a zero-shot run does not read the seed), skipped" \
        in said
    assert is_finished(config, "zero-shot")
    folder = tmp_path / "tiny-0" / "arc_easy" / "zero-shot"
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == ["seed2"]
    (other,), _, _ = run(1, eval_batch_size=1)  # another identity: not that run, scored under its own seed
    assert other["seed"] == 1 and other["started_at"] != zero["started_at"]
    (forced,), _, _ = run(3, force=True)
    assert forced["seed"] == 3 and (folder / "seed3").is_dir()
    (folder / "seed2" / "samples.jsonl").write_text("damaged\n")  # a damaged run is passed over, not used
    (found,), _, _ = run(4)
    assert found["started_at"] == forced["started_at"]


def test_a_sweep_of_two_seeds_plans_zero_shot_once(tmp_path):
    """Both seeds' zero-shot jobs find the run of seed 0 (skipped), yet each job keeps its own folder to write:
    the check that no two jobs write one folder does not take them for one."""
    from softeval.sweep.driver import plan
    from softeval.sweep.file import parse_sweep

    options = {"limit": 3, "eval_batch_size": 3, "device": "cpu"}
    out = tmp_path / "runs"
    run_job(RunConfig(model="smollm2-135m-instruct", task="arc_easy", methods=("zero-shot",), out=str(out),
                      **options), lm=tiny_lm())
    spec = {"out": str(out), "models": ["smollm2-135m-instruct"], "tasks": ["arc_easy"],
            "methods": ["zero-shot", "few-shot"], "seeds": [0, 1], **options}
    states = {(s.job.method, s.job.config.seed): (s.state, s.folder.name) for s in plan(parse_sweep(spec, tmp_path /
                                                                                                    "s.yaml"))}
    assert states == {("zero-shot", 0): ("skipped", "seed0"), ("zero-shot", 1): ("skipped", "seed0"),
                      ("few-shot", 0): ("queued", "seed0"), ("few-shot", 1): ("queued", "seed1")}


def test_a_seed_s_run_never_writes_into_the_folder_of_another_seed_it_found(tmp_path, monkeypatch):
    """The other seed's run is only read: replaced by a run of other settings between the look-up and the skip, it
    is not this run, and this seed's run is scored into its own folder."""
    from softeval.run import pipeline

    def config(seed, **kw):
        return RunConfig(**{"model": "tiny-0", "task": "arc_easy", "methods": ("zero-shot",), "limit": 3,
                            "eval_batch_size": 3, "out": str(tmp_path), "device": "cpu", "seed": seed, **kw})

    run_job(config(0, eval_batch_size=1), lm=tiny_lm())  # seed 0: other settings than the seed-1 run below
    seed0 = pipeline.run_folder(config(0), "zero-shot")[0]
    monkeypatch.setattr(pipeline, "found_run", lambda cfg, method, here=True: (seed0, cfg.options(method, here)))
    (result,) = run_job(config(1), lm=tiny_lm())
    assert result["seed"] == 1 and (tmp_path / "tiny-0" / "arc_easy" / "zero-shot" / "seed1").is_dir()
    assert '"eval_batch_size": 1' in (seed0.final / "results.json").read_text()  # untouched
