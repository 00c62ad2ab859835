"""What a zero-shot run reads: not the seed, the tuning batch or the held-out slice's size, which pick the tuning
pool and the shots (store.identity.READ_ONLY_BY). Its outputs are the same under any of them, so they are not part
of its identity: another tuning setting leaves a finished zero-shot run finished, and a zero-shot run is paired with a
soft prompt of another seed without "not judged" (store.identity.setting_diff)."""

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
