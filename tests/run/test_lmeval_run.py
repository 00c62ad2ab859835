"""A whole run (zero-shot, few-shot, soft-prompt) of lm-eval tasks on the tiny model: lm-eval's prompts
are what the model reads, its filters' answers and metrics are in every sample, a changed YAML is
another run."""

from __future__ import annotations

import json

import pytest
from lmevalyamls import ADD, MC, write_tasks
from tiny import tiny_lm

from softeval.errors import UserError
from softeval.run.config import LM_EVAL, RunConfig
from softeval.run.pipeline import run_job
from softeval.tasks import get_task

pytest.importorskip("lm_eval")


def config(out, include_path, task=ADD, **kw) -> RunConfig:
    base = dict(model="tiny-0", task=f"lm-eval:{task}", include_path=str(include_path), limit=4, steps=2, shots=2,
                tokens=3, lr=0.1, out=str(out), curve_every=1, curve_items=2, eval_batch_size=4, batch_size=4,
                chat_template="off")
    return RunConfig(**{**base, **kw})


def samples(result: dict, out) -> list[dict]:
    folder = out / "tiny-0" / result["task"].replace(":", "--") / result["method"] / "seed0"
    return [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]


def test_a_generative_run_reads_lm_evals_prompts_and_scores_with_its_filters(tmp_path):
    folder = write_tasks(tmp_path / "yamls")
    out = tmp_path / "runs"
    results = run_job(config(out, folder), lm=tiny_lm())
    assert [r["method"] for r in results] == ["zero-shot", "few-shot", "soft-prompt"]
    task = get_task(f"lm-eval:{ADD}", str(folder))
    splits = task.splits("offline")
    by_id = {e.id: e for e in splits.eval}
    for result in results:
        assert result["config"][LM_EVAL]["config_sha256"] and result["split"]["tune"] == "train"
        k = 2 if result["method"] == "few-shot" else 0
        rows = samples(result, out)
        items = [by_id[row["id"]] for row in rows]
        assert [row["prompt"] for row in rows] == task.contexts(items, k, None)
        for row, item in zip(rows, items):
            assert row["strict"] == task.strict(row["output"], item)
            assert row["lm_eval"] == task.extra["item_metrics"](row["output"], item)
            assert row["correct"] == (row["lm_eval"]["strict-match"]["exact_match"] == 1.0)
        assert result["metrics"]["accuracy"]["value"] == sum(
            r["lm_eval"]["strict-match"]["exact_match"] for r in rows) / len(rows)


def test_a_multiple_choice_run_scores_lm_evals_acc_and_acc_norm(tmp_path):
    folder = write_tasks(tmp_path / "yamls")
    out = tmp_path / "runs"
    results = run_job(config(out, folder, task=MC, methods=("zero-shot", "soft-prompt")), lm=tiny_lm(seed=3))
    task = get_task(f"lm-eval:{MC}", str(folder))
    lm_task = (task.splits("offline"), task.extra["lm_eval"].built())[1]
    for result in results:
        assert {"cloze_accuracy", "cloze_accuracy_norm"} <= set(result["metrics"])
        for row in samples(result, out):
            doc = next(e for e in task.splits("offline").eval if e.id == row["id"]).fields["doc"]
            theirs = lm_task.process_results(doc, [(score, False) for score in row["cloze_scores"]])
            assert (row["cloze_correct"], row["cloze_norm_correct"]) == (theirs["acc"] == 1.0,
                                                                          theirs["acc_norm"] == 1.0)


def test_a_changed_yaml_is_another_run(tmp_path):
    folder = write_tasks(tmp_path / "yamls")
    out = tmp_path / "runs"
    run_job(config(out, folder, methods=("zero-shot",)), lm=tiny_lm())
    assert run_job(config(out, folder, methods=("zero-shot",)), lm=tiny_lm())[0]["n"] == 4  # skipped: same run
    changed = write_tasks(tmp_path / "changed", max_gen_toks=7)
    with pytest.raises(UserError, match="lm_eval"):
        run_job(config(out, changed, methods=("zero-shot",)), lm=tiny_lm())


def test_a_changed_data_row_of_a_yaml_over_local_files_is_another_run(tmp_path):
    folder = write_tasks(tmp_path / "yamls")
    out = tmp_path / "runs"
    run_job(config(out, folder, methods=("zero-shot",)), lm=tiny_lm())
    data = sorted(folder.glob("add_test.jsonl"))[0]
    data.write_text(data.read_text().replace("1", "2", 1))  # one row of the scored split edited, same YAML
    with pytest.raises(UserError, match="lm_eval"):
        run_job(config(out, folder, methods=("zero-shot",)), lm=tiny_lm())


def test_more_shots_than_lm_evals_few_shot_split_is_refused_before_the_model_loads(tmp_path):
    folder = write_tasks(tmp_path / "yamls")  # toy_mc: 12 validation rows tune; shots from the 8 scored rows
    (folder / "toy_mc.yaml").write_text((folder / "toy_mc.yaml").read_text() + "fewshot_split: test\n")
    cfg = config(tmp_path / "runs", folder, task=MC, methods=("few-shot",), shots=8, model="smollm2-135m-instruct")
    with pytest.raises(UserError, match=r"^--shots 8 is more than the 7 few-shot examples \(lm-eval's test split\) "
                                        rf"of lm-eval:{MC}: use --shots 7 or less$"):
        run_job(cfg)  # a model named to load: the refusal comes first
    assert not (tmp_path / "runs").exists()
    assert run_job(config(tmp_path / "runs", folder, task=MC, methods=("few-shot",), shots=7), lm=tiny_lm())


@pytest.mark.parametrize("metrics", [["bleu", "exact_match"], ["bleu"]])
def test_a_metric_that_is_not_0_1_is_aggregated_by_lm_evals_own_function(tmp_path, metrics, capsys):
    from lm_eval.api.metrics import bleu

    from softeval.cli.app import print_table

    folder = write_tasks(tmp_path / "yamls")
    yaml = folder / "toy_add.yaml"
    listed = "".join(f"  - metric: {m}\n" + ('    regexes_to_ignore:\n      - "= "\n' if m == "exact_match" else "")
                     for m in metrics)
    head, rest = yaml.read_text().split("metric_list:")
    yaml.write_text(head + "metric_list:\n" + listed + rest[rest.index("generation_kwargs:"):])
    out = tmp_path / "runs"
    [result] = run_job(config(out, folder, methods=("zero-shot",)), lm=tiny_lm())
    rows = samples(result, out)
    own = result["metrics"]["lm_eval"]
    pairs = [row["lm_eval"]["strict-match"]["bleu"] for row in rows]  # lm-eval's per-item (reference, prediction)
    assert all(isinstance(p, list) and len(p) == 2 for p in pairs)
    assert own["metrics"]["bleu,strict-match"] == pytest.approx(bleu(pairs))
    assert own["metrics"]["bleu_stderr,strict-match"] == "N/A" and own["sample_len"] == len(rows) == 4
    if "exact_match" in metrics:  # correct: the first metric that is a number per item
        assert own["correct"].startswith("exact_match of the strict-match answer is 1 (0/1 per item")
        assert [r["correct"] for r in rows] == [r["lm_eval"]["strict-match"]["exact_match"] == 1.0 for r in rows]
    else:
        assert own["correct"].startswith("no metric of this task is a number per item")
        assert not any(r["correct"] for r in rows) and result["metrics"]["accuracy"]["value"] == 0.0
    print_table([result])  # the run's table says lm-eval's score and what correct means
    shown = capsys.readouterr().out
    assert f"lm-eval, zero-shot: bleu,strict-match {own['metrics']['bleu,strict-match']:.4f}" in shown
    assert "correct: " + own["correct"][:30] in shown
