"""Some tuning options default by what a task's targets are (run/config.py, TARGET_DEFAULTS): a built-in task of
worked solutions tunes with the recipe that learned GSM8K's format, every other task with the table's defaults.
Not given anywhere (flag, sweep file, track, library), an option takes its task's default; given, it wins."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from softeval.cli.app import _config as config_of_args
from softeval.cli.app import build_parser
from softeval.constants import ONE_LINE, TARGET_KINDS, WORKED_SOLUTION
from softeval.run.config import BY_TARGET, OPTIONS, TARGET_DEFAULTS, RunConfig, spelled
from softeval.sweep.file import parse_sweep
from softeval.tasks import TASKS

RECIPE = TARGET_DEFAULTS[WORKED_SOLUTION]
TABLE = {key: OPTIONS[key].default for key in RECIPE}


def recipe_of(config: RunConfig) -> dict:
    return {key: getattr(config, key) for key in RECIPE}


def test_the_options_that_default_by_target_are_the_recipe_s_and_every_task_has_a_kind():
    assert {key for key, row in OPTIONS.items() if row.by_target} == set(RECIPE)
    assert set(TARGET_DEFAULTS) <= set(TARGET_KINDS)
    assert all(task.target_kind in TARGET_KINDS for task in TASKS.values())
    assert {name for name, task in TASKS.items() if task.target_kind == WORKED_SOLUTION} == {"gsm8k", "math500"}
    assert RECIPE == {"lr": 0.3, "lr_schedule": "linear", "init": "instruction", "answer_share": 0.5}
    assert TABLE == {"lr": 0.03, "lr_schedule": "constant", "init": "vocab", "answer_share": None}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_built_in_task_tunes_with_its_kind_s_defaults(name):
    config = RunConfig(model="m", task=name)
    assert recipe_of(config) == (RECIPE if TASKS[name].target_kind == WORKED_SOLUTION else TABLE)
    assert BY_TARGET not in vars(config).values()


def test_an_lm_eval_task_or_a_task_file_that_says_nothing_takes_the_table_s_defaults(tmp_path):
    (tmp_path / "plain.yaml").write_text("data: d.jsonl\nprompt: 'Q: {{ q }}'\nanswer_field: a\nanswer_regex: '(.*)'\n")
    for task in (str(tmp_path / "plain.yaml"), tmp_path / "plain.yaml", str(tmp_path / "missing.yaml"),
                 "lm-eval:gsm8k", "nonsense"):
        assert recipe_of(RunConfig(model="m", task=task)) == TABLE


def test_a_task_file_that_says_its_targets_are_worked_solutions_tunes_with_the_recipe(tmp_path):
    file = tmp_path / "steps.yaml"
    file.write_text("data: d.jsonl\nprompt: 'Q: {{ q }}'\nanswer_field: a\nanswer_regex: '#### (.*)'\n"
                    "target_kind: worked-solution\n")
    assert recipe_of(RunConfig(model="m", task=str(file))) == RECIPE
    assert recipe_of(RunConfig(model="m", task=str(file), lr=0.01)) == {**RECIPE, "lr": 0.01}
    file.write_text(file.read_text().replace("worked-solution", "one-line"))
    assert recipe_of(RunConfig(model="m", task=str(file))) == TABLE
    file.write_text(file.read_text().replace("one-line", "essay"))  # the run's checks name it; no crash here
    assert recipe_of(RunConfig(model="m", task=str(file))) == TABLE


def test_a_given_value_wins_and_none_turns_the_answer_share_off():
    config = RunConfig(model="m", task="gsm8k", lr=0.1, answer_share=None, init="vocab")
    assert recipe_of(config) == {"lr": 0.1, "lr_schedule": "linear", "init": "vocab", "answer_share": None}
    assert recipe_of(replace(config, steps=3)) == recipe_of(config)  # a copy keeps what was resolved
    assert RunConfig(model="m", task="mmlu", answer_share=0.5).answer_share == 0.5


def parsed(*argv: str) -> RunConfig:
    args = build_parser().parse_args(["run", "--model", "m", *argv])
    return config_of_args(args, ("soft-prompt",))


def test_the_command_line_leaves_what_is_not_given_to_the_task():
    assert recipe_of(parsed("--task", "gsm8k")) == RECIPE
    assert recipe_of(parsed("--task", "squad")) == TABLE
    assert recipe_of(parsed("--task", "gsm8k", "--answer-share", "none", "--lr", "0.05")) == {
        **RECIPE, "answer_share": None, "lr": 0.05}
    assert parsed("--task", "mmlu", "--answer-share", "0.25").answer_share == 0.25
    assert parsed("--task", "mmlu", "--limit", "None").limit is None
    with pytest.raises(SystemExit):
        parsed("--task", "mmlu", "--answer-share", "half")


def test_a_sweep_file_and_track_leave_it_to_each_task(tmp_path):
    spec = {"out": str(tmp_path), "models": ["smollm2-135m-instruct"], "tasks": ["gsm8k", "mmlu"],
            "methods": ["soft-prompt"]}
    jobs = {job.config.task: job.config for job in parse_sweep(spec, tmp_path / "s.yaml").jobs}
    assert (recipe_of(jobs["gsm8k"]), recipe_of(jobs["mmlu"])) == (RECIPE, TABLE)
    jobs = {job.config.task: job.config for job in parse_sweep({**spec, "answer_share": None, "lr": 0.1},
                                                               tmp_path / "s.yaml").jobs}
    assert recipe_of(jobs["gsm8k"]) == {**RECIPE, "answer_share": None, "lr": 0.1}
    assert recipe_of(jobs["mmlu"]) == {**TABLE, "lr": 0.1}


def test_a_one_line_task_records_what_runs_before_the_defaults_by_target_recorded():
    """Runs written before these defaults existed stay finished: a one-line task's record is as it was."""
    options = RunConfig(model="m", task="mmlu").options("soft-prompt", here=False)
    assert {key: options.get(key) for key in RECIPE} == TABLE and "answer_share" not in options
    assert RunConfig(model="m", task="gsm8k").options("soft-prompt", here=False)["answer_share"] == 0.5


def test_the_recipe_spelled_as_flags():
    assert spelled(RECIPE) == "--lr 0.3 --lr-schedule linear --init instruction --answer-share 0.5"
    assert spelled(RunConfig(model="m", task="mmlu"), ["answer_share", "lr"]) == "--answer-share none --lr 0.03"
    assert ONE_LINE == "one-line"


def test_a_gsm8k_run_tunes_with_the_recipe_says_so_and_refuses_a_run_of_the_old_defaults(tmp_path):
    """A tiny model's GSM8K soft prompt (one step): its config records the recipe, the run says which settings it
    tunes with, and a finished run of the table's defaults is another run, named by what differs."""
    import io

    from rich.console import Console
    from tiny import tiny_lm

    from softeval.run.pipeline import run_job
    from softeval.store.runs import OtherSettings

    def run(**kw):
        config = RunConfig(model="tiny-0", task="gsm8k", methods=("soft-prompt",), limit=1, steps=1, batch_size=2,
                           curve_items=0, eval_batch_size=1, out=str(tmp_path), device="cpu", **kw)
        console = Console(file=io.StringIO(), width=200)
        return run_job(config, console=console, lm=tiny_lm())[0], console.file.getvalue()

    old, _ = run(**TABLE)
    assert {key: old["config"].get(key) for key in RECIPE} == TABLE
    with pytest.raises(OtherSettings, match=r"lr: 0\.03 -> 0\.3.*lr_schedule: 'constant' -> 'linear'"):
        run()
    result, said = run(force=True)
    assert {key: result["config"][key] for key in RECIPE} == RECIPE
    assert ("gsm8k's targets are worked solutions: tuning with --lr 0.3 --lr-schedule linear --init instruction "
            "--answer-share 0.5") in said


@given(st.sampled_from(sorted(TASKS) + ["lm-eval:gsm8k", "my_task.yaml"]),
       st.fixed_dictionaries({}, optional={"lr": st.floats(1e-4, 1.0), "lr_schedule": st.sampled_from(["constant",
                                                                                                       "linear"]),
                                           "init": st.sampled_from(["vocab", "random", "instruction"]),
                                           "answer_share": st.none() | st.floats(0.01, 0.99)}))
def test_property_a_given_option_is_kept_and_the_rest_are_the_task_s_defaults(task, given_options):
    defaults = RECIPE if task in TASKS and TASKS[task].target_kind == WORKED_SOLUTION else TABLE
    assert recipe_of(RunConfig(model="m", task=task, **given_options)) == {**defaults, **given_options}


def test_a_task_file_whose_targets_look_like_worked_solutions_is_told_the_recipe(tmp_path):
    """A task file that does not say its kind tunes with the one-line defaults; when its targets are long, the run
    says they look like worked solutions and names the recipe; it does not when a flag was given, when the file
    says target_kind: worked-solution (then the recipe runs), or when the targets are short."""
    import io
    import json

    from rich.console import Console
    from tiny import tiny_lm

    from softeval.run.pipeline import run_job
    from softeval.run.training import WORKED_LOOKING_CHARS

    rows = [{"q": f"{a} + {a}", "a": str(2 * a)} for a in range(12)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    reasoning = "We add the two numbers one digit at a time, carrying where a column passes nine.\n"

    def said(target, kind=None, **kw):
        spec = {"data": "rows.jsonl", "prompt": "Q: {{ q }}\nA:", "answer_field": "a", "matcher": "numeric",
                "answer_regex": "#### (\\S+)", "target": target, "stop": "Q:", "max_new_tokens": 4,
                **({"target_kind": kind} if kind else {})}
        task = tmp_path / "add.yaml"
        task.write_text(json.dumps(spec))
        config = RunConfig(model="tiny-0", task=str(task), methods=("soft-prompt",), limit=1, steps=1, batch_size=2,
                           curve_items=0, eval_batch_size=1, out=str(tmp_path / "runs"), device="cpu", force=True, **kw)
        console = Console(file=io.StringIO(), width=400)
        run_job(config, console=console, lm=tiny_lm())
        return console.file.getvalue()

    long_target = " " + reasoning * 2 + "#### {{ gold }}"
    assert len(long_target) >= WORKED_LOOKING_CHARS
    hint = said(long_target)
    assert "add's tuning targets look like worked solutions (median" in hint and "100% of several lines" in hint
    assert "the defaults for worked solutions are --lr 0.3 --lr-schedule linear --init instruction " \
           "--answer-share 0.5" in hint
    assert "look like worked solutions" not in said(long_target, lr=0.1)
    recipe = said(long_target, kind="worked-solution")
    assert "look like" not in recipe and "add's targets are worked solutions: tuning with --lr 0.3" in recipe
    assert "look like worked solutions" not in said(" #### {{ gold }}")


@given(st.lists(st.text(alphabet="ab \n", max_size=300), min_size=1, max_size=30))
def test_property_the_worked_looking_warning_states_its_targets_median_and_share(targets):
    import re
    from types import SimpleNamespace

    from softeval.run.training import WORKED_LOOKING_CHARS, worked_looking

    task = SimpleNamespace(name="t", target=lambda example: example)
    said = worked_looking(task, targets, RunConfig(model="m", task="lm-eval:t"))
    median = sorted(map(len, targets))[len(targets) // 2]
    assert (said is not None) == (median >= WORKED_LOOKING_CHARS)
    if said:
        share = sum("\n" in t.strip() for t in targets) / len(targets)
        assert re.search(rf"\(median {median} characters, {share:.0%} of several lines\)", said)
    assert worked_looking(task, targets, RunConfig(model="m", task="lm-eval:t", lr=0.3)) is None
