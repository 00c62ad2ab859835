"""benchmarks/claim_a.py's table: what it says about a format that saturated and one that did not."""

from benchscripts import load_benchmark
from runfactory import Extras, Items, write_run

claim_a = load_benchmark("claim_a")


def _world(out):
    n = 20
    # gsm8k: few-shot follows the format, the soft prompt never reached it (the GSM8K case)
    write_run(out, "m", "gsm8k", "zero-shot", [False] * n, items=Items(format_ok=[False] * n))
    write_run(out, "m", "gsm8k", "few-shot", [True] + [False] * 19, items=Items(format_ok=[True] * 19 + [False]))
    write_run(out, "m", "gsm8k", "soft-prompt", [False] * n, items=Items(format_ok=[True] * 2 + [False] * 18),
              extras=Extras(tuning={"format_0.9_step": None, "steps_run": 80}))
    # mmlu: the soft prompt saturates at step 20 and gains 6 items over zero-shot
    write_run(out, "m", "mmlu", "zero-shot", [True] * 4 + [False] * 16,
              items=Items(format_ok=[True] * 10 + [False] * 10))
    write_run(out, "m", "mmlu", "few-shot", [True] * 5 + [False] * 15)
    curve = [{"step": 0, "loss": None, "format_rate": 0.5, "accuracy": 0.2},
             {"step": 1, "loss": 1.4, "format_rate": None, "accuracy": None},
             {"step": 10, "loss": 1.0, "format_rate": 0.875, "accuracy": 0.25},
             {"step": 20, "loss": 0.8, "format_rate": 0.9375, "accuracy": 0.25}]
    write_run(out, "m", "mmlu", "soft-prompt", [True] * 10 + [False] * 10,
              extras=Extras(tuning={"format_0.9_step": 20, "steps_run": 30}, curve=curve))


def test_rows_and_table_say_where_the_format_saturated(tmp_path):
    _world(tmp_path)
    rows = claim_a.rows(tmp_path, seed=0)
    assert [(r["model"], r["task"]) for r in rows] == [("m", "gsm8k"), ("m", "mmlu")]
    gsm8k, mmlu = rows
    assert gsm8k["soft-prompt"]["format_rate"] == 0.1 and gsm8k["few-shot"]["format_rate"] == 0.95
    assert claim_a.saturated(gsm8k) == "no: held-out format_rate never reached 0.90 in 80 steps"
    assert claim_a.saturated(mmlu) == "yes, step 20"
    assert mmlu["vs zero-shot"]["difference"] == 0.3 and mmlu["vs zero-shot"]["n"] == 20
    table = claim_a.markdown(rows)
    assert "| m | gsm8k | 20 | 0.00 (0.00) | 0.05 (0.95) | 0.00 (0.10) | no: held-out" in table
    assert "| m | mmlu | 20 | 0.20 (0.50) | 0.25 (1.00) | 0.50 (1.00) | yes, step 20 | 0: 0.50, 10: 0.88, 20: 0.94 " \
           "| - | +0.30 [" in table
    assert "| 0.00 (0.10) | no: held-out format_rate never reached 0.90 in 80 steps | - | 18/20: wrong style 18 | " \
        in table  # no curve file; what the misses were
    assert claim_a.why_not(mmlu) == "-"  # every scored item followed the format


def test_a_format_not_reached_says_whether_the_held_out_loss_was_still_falling(tmp_path):
    """The row of a tuning that missed the format says, as its run's last line did, whether the held-out loss was
    still falling at the last curve point (so more steps may reach it) -- read from its curve.jsonl."""
    def curve(losses):
        return [{"step": 40 * i, "loss": None if i == 0 else 1.0, "format_rate": 0.25, "accuracy": 0.0,
                 "held_out_loss": x} for i, x in enumerate(losses)]

    for task, losses in (("gsm8k", [2.7, 1.31, 0.96]), ("math500", [1.27, 1.19, 1.185])):
        write_run(tmp_path, "m", task, "soft-prompt", [False] * 4, items=Items(format_ok=[False] * 4),
                  extras=Extras(tuning={"format_0.9_step": None, "steps_run": 80}, curve=curve(losses)))
    falling, flat = (row for _, row in sorted((r["task"], r) for r in claim_a.rows(tmp_path, seed=0)))
    assert claim_a.saturated(falling) == ("no: held-out format_rate never reached 0.90 in 80 steps; its held-out "
                                          "loss was still falling (1.31 at step 40, 0.96 at step 80)")
    assert claim_a.saturated(flat) == "no: held-out format_rate never reached 0.90 in 80 steps"  # 0.4% below


def test_a_soft_prompt_that_reached_the_format_only_on_the_held_out_slice_is_not_called_saturated():
    row = {"soft-prompt": {"accuracy": 0.1, "format_rate": 0.7}, "format_step": 40, "steps_run": 80}
    assert claim_a.saturated(row) == "held-out only (step 40); scored items 0.70"


def test_a_tuning_without_a_held_out_slice_is_not_said_to_have_missed_the_format():
    row = {"soft-prompt": {"format_rate": 0.75}, "format_step": None, "steps_run": 2, "curve_items": 0, "curve": []}
    assert claim_a.saturated(row) == "not measured on a held-out slice (--curve-items 0); scored items 0.75"


def test_another_seed_s_zero_shot_run_is_this_seed_s(tmp_path):
    """A zero-shot run reads no seed (softeval finds seed 0's for --seed 1): the table of seed 1 shows it."""
    write_run(tmp_path, "m", "gsm8k", "zero-shot", [True, False], seed=0, items=Items(format_ok=[True, False]))
    write_run(tmp_path, "m", "gsm8k", "soft-prompt", [True, True], seed=1, items=Items(format_ok=[True, True]))
    (row,) = claim_a.rows(tmp_path, seed=1)
    assert row["zero-shot"]["accuracy"] == 0.5 and row["vs zero-shot"]["difference"] == 0.5


def test_a_saved_soft_prompt_scored_again_is_not_read_as_a_tuning_that_never_reached_the_format():
    row = {"soft-prompt": {"format_rate": 0.9}, "format_step": None, "steps_run": None, "loaded_from": "s/soft_prompt"}
    assert claim_a.saturated(row) == "a saved soft prompt, not tuned in this run; scored items 0.90"


def test_a_pair_whose_soft_prompt_has_not_run_says_so(tmp_path):
    write_run(tmp_path, "m", "gsm8k", "zero-shot", [False] * 4, items=Items(format_ok=[False] * 4))
    (row,) = claim_a.rows(tmp_path, seed=0)
    assert claim_a.saturated(row) == "soft prompt not run"
    assert "soft prompt not run" in claim_a.markdown([row])


def test_the_misses_are_listed_by_cause_most_first():
    row = {"soft-prompt": {"n": 20, "failures": {"failed": 3, "causes": {"empty": 0, "max_new_tokens": 1,
                                                                         "wrong_style": 2, "other": 0}}}}
    assert claim_a.why_not(row) == "3/20: wrong style 2, max new tokens 1"
    assert claim_a.why_not({"soft-prompt": {"n": 20}}) == "-"  # a run recorded without them
