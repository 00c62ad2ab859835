"""A sweep file's ``prompt_variants: K`` (tasks/variants.py): every method of that level under variants 0 to K-1, each
its own job and folder; ``prompt_variant: N`` picks one; both at one level, or a K out of range, is refused in one
line; an lm-eval task keeps its own prompt, scored under variant 0 only, and the sweep says so."""

from __future__ import annotations

import pytest

from softeval.errors import UserError
from softeval.sweep.file import parse_sweep

BASE = {"models": ["smollm2-135m-instruct"], "methods": ["zero-shot", "few-shot"], "limit": 3, "device": "cpu"}


def jobs(tmp_path, **spec):
    sweep = parse_sweep({"out": str(tmp_path / "runs"), **BASE, **spec}, tmp_path / "s.yaml")
    return sorted((j.config.task, j.method, j.config.prompt_variant) for j in sweep.jobs), sweep


def test_prompt_variants_runs_every_method_under_each_variant_and_a_lower_level_picks_its_own(tmp_path):
    found, _ = jobs(tmp_path, tasks=["arc_easy", {"name": "mmlu", "prompt_variant": 2}], prompt_variants=3)
    assert found == sorted([("arc_easy", m, v) for m in ("zero-shot", "few-shot") for v in range(3)]
                           + [("mmlu", m, 2) for m in ("zero-shot", "few-shot")])


def test_one_prompt_variant(tmp_path):
    found, _ = jobs(tmp_path, tasks=[{"name": "arc_easy", "prompt_variant": 4}])
    assert found == [("arc_easy", "few-shot", 4), ("arc_easy", "zero-shot", 4)]


def test_both_keys_at_once_are_refused(tmp_path):
    with pytest.raises(UserError, match=r"task arc_easy: 'prompt_variants: 2' runs variants 0 to 1: leave out "
                                        r"'prompt_variant: 3'"):
        jobs(tmp_path, tasks=["arc_easy"], prompt_variants=2, prompt_variant=3)


@pytest.mark.parametrize("bad", [0, 65, "3", 2.5, True])
def test_a_count_out_of_range_is_refused(tmp_path, bad):
    with pytest.raises(UserError, match="prompt_variants"):
        jobs(tmp_path, tasks=["arc_easy"], prompt_variants=bad)


def test_an_lm_eval_task_is_scored_under_its_own_prompt_only_and_the_sweep_says_so(tmp_path, capsys):
    pytest.importorskip("lm_eval")
    found, sweep = jobs(tmp_path, tasks=["lm-eval:arc_easy"], prompt_variants=3)
    assert {v for _, _, v in found} == {0}
    [note] = sweep.notes  # said once every check has passed (sweep/view.print_notes), not while the file is read
    assert "keeps lm-eval's prompt, so it is scored under variant 0 only" in note


def test_a_variant_the_task_does_not_have_is_refused_before_any_worker_starts(tmp_path):
    """squad has 72 formats (0-71; tasks/variants.py ``count``): the driver refuses what a worker would refuse."""
    with pytest.raises(UserError, match=r"model smollm2-135m-instruct, task squad: 'prompt_variant: 80': task squad "
                                        r"has prompt variants 0 to 71"):
        jobs(tmp_path, tasks=[{"name": "squad", "prompt_variant": 80}])


def test_more_variants_than_a_task_file_has_are_refused_by_the_driver(tmp_path):
    """A task file with no instruction and free-form answers has 36 formats: ``prompt_variants: 40`` passes the
    schema (1-64) but not the task."""
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(f'{{"q": "question {i}?", "a": "{i}"}}\n' for i in range(6)))
    task = tmp_path / "qa.yaml"
    task.write_text(f"name: qa\ndata: {data}\nanswer_field: a\nanswer_regex: '\\d+'\n"
                    "prompt: 'Question: {{ q }}\\nAnswer:'\n")
    with pytest.raises(UserError, match=r"task .*qa.yaml: prompt_variants: 40: task qa has no 40 prompt variants: "
                                        r"it has 36 \(0 to 35\)"):
        jobs(tmp_path, tasks=[str(task)], prompt_variants=40)
