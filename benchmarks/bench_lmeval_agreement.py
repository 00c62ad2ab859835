"""Does softeval's ``lm-eval:NAME`` run score as lm-evaluation-harness itself does? Item by item.

Not a test (tests/benchmarks/test_lmeval_agreement.py runs it small). Both sides run in one process on
the same loaded model object (lm-eval's ``HFLM`` is given it): softeval's ``run_job`` on ``lm-eval:NAME``
(zero-shot, or few-shot with K shots; chat template off; the seeded ``--limit`` pick of documents) and
lm-eval's ``simple_evaluate`` on the same task object, the same documents (``samples``), the same shots
and few-shot seed. Per setting: items, and how many have the same prompt text, the same prompt token ids,
the same output (generative: the text; multiple choice: the choices' log-likelihoods within 1e-4), the
same filtered answers and the same per-item metrics, and both tools' aggregates. The last printed line
is JSON.

    .venv/bin/python benchmarks/bench_lmeval_agreement.py --model smollm2-135m-instruct \\
        --setting gsm8k:0:5 --setting gsm8k:5:5 --setting arc_easy:0:40 --setting mmlu_abstract_algebra:5:40
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

from rich.console import Console

from softeval.lm.models import load_model
from softeval.run.config import RunConfig
from softeval.run.pipeline import run_job
from softeval.run.prompting import Prompter
from softeval.tasks import get_task

LL_TOLERANCE = 1e-4  # log-likelihoods of one model object, batch 1 on both sides


def _context(arguments) -> str:
    """The context of a logged lm-eval sample's first request (a tuple, or lm-eval's dict form)."""
    first = arguments[0] if isinstance(arguments, list) else next(iter(arguments.values()))
    return first[0] if isinstance(first, list | tuple) else first["arg_0"]


def theirs_by_item(logged: list[dict]) -> dict[int, dict[str, dict]]:
    """lm-eval's logged samples by document index and filter."""
    out: dict[int, dict[str, dict]] = {}
    for sample in logged:
        out.setdefault(sample["doc_id"], {})[sample["filter"]] = sample
    return out


def compare(lm, hflm, name: str, k: int, limit: int, out: Path) -> dict:
    """One setting: softeval's run and lm-eval's ``simple_evaluate`` on the same documents, compared."""
    from lm_eval import simple_evaluate

    method = "few-shot" if k else "zero-shot"
    config = RunConfig(model=lm.name, task=f"lm-eval:{name}", limit=limit, shots=max(k, 1), methods=(method,),
                       chat_template="off", out=str(out / f"{name}-{k}"), eval_batch_size=1)
    (result,) = run_job(config, Console(stderr=True, quiet=True), lm=lm)
    folder = out / f"{name}-{k}" / lm.name / f"lm-eval--{name}" / method / "seed0"
    rows = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    task = get_task(config.task)
    splits = task.splits("offline")
    by_id = {e.id: e for e in splits.eval}
    items = [by_id[row["id"]] for row in rows]
    prompter = Prompter(lm, task, False, splits.tune[:k], items=items)
    indices = sorted(e.fields["index"] for e in items)
    lm_task = task.extra["lm_eval"].built()
    theirs = simple_evaluate(model=hflm, tasks=[lm_task], num_fewshot=k, samples={lm_task.config.task: indices},
                             log_samples=True, fewshot_random_seed=1234, apply_chat_template=False,
                             bootstrap_iters=0, verbosity="ERROR")
    logged = theirs_by_item(theirs["samples"][lm_task.config.task])
    aggregates = theirs["results"][lm_task.config.task]
    generative = task.cloze is None
    same = {"prompt_text": 0, "prompt_ids": 0, "output": 0, "filtered": 0, "metrics": 0}
    for row, item in zip(rows, items):
        for key, value in item_same(row, item, logged[item.fields["index"]], (prompter, method), hflm,
                                    generative).items():
            same[key] += value
    pairs = aggregate_pairs(task, lm_task, result["metrics"], aggregates)
    return {"task": name, "shots": k, "items": len(rows), **{f"same_{key}": v for key, v in same.items()},
            "aggregates": {key: {"softeval": value, "lm_eval": aggregates.get(key)} for key, value in pairs.items()}}


def item_same(row: dict, item, by_filter: dict[str, dict], ours: tuple, hflm, generative: bool) -> dict[str, bool]:
    """One item: what softeval wrote of it (``row``; ``ours``: the prompter and method that built its prompt)
    against lm-eval's logged samples of it (``by_filter``), each comparison true or false."""
    prompter, method = ours
    first = next(iter(by_filter.values()))
    context = _context(first["arguments"])
    their_ids = (hflm.tok_batch_encode([context])[0][0].tolist() if generative else hflm.tok_encode(context))
    same = {"prompt_text": row["prompt"] == context, "prompt_ids": prompter.ids(item, method) == their_ids}
    if generative:
        same["output"] = row["output"] == first["resps"][0][0]
        same["filtered"] = all(row["lm_eval"][f]["answer"] == s["filtered_resps"][0] for f, s in by_filter.items())
        same["metrics"] = all(row["lm_eval"][f][m] == s[m] for f, s in by_filter.items() for m in s["metrics"])
    else:
        lls = [float(resp[0][0]) for resp in first["resps"]]
        same["output"] = all(abs(a - b) <= LL_TOLERANCE for a, b in zip(row["cloze_scores"], lls))
        same["filtered"] = row["cloze_pred"] == item.fields["choices"][max(range(len(lls)), key=lls.__getitem__)]
        same["metrics"] = (row["cloze_correct"] == (first["acc"] == 1.0)
                           and row["cloze_norm_correct"] == (first.get("acc_norm", first["acc"]) == 1.0))
    return same


def aggregate_pairs(task, lm_task, ours: dict, aggregates: dict) -> dict[str, float]:
    """softeval's aggregate under each name lm-eval gives its own (``aggregates``): the strict and lenient
    accuracy of a generative task under its filters' names, a multiple-choice task's cloze accuracies."""
    if task.cloze is None:
        strict, lenient = task.extra["lm_eval"].pipelines()
        metric = next(iter(lm_task._metric_fn_list))
        return {f"{metric},{strict.name}": ours["accuracy"]["value"],
                f"{metric},{lenient.name}": ours["lenient_accuracy"]["value"]}
    pairs = {"acc,none": ours["cloze_accuracy"]["value"]}
    if "acc_norm,none" in aggregates:
        pairs["acc_norm,none"] = ours["cloze_accuracy_norm"]["value"]
    return pairs


def table(rows: list[dict]) -> str:
    lines = ["| task | shots | items | same prompt text | same prompt ids | same outputs | same filtered answers "
             "| same per-item metrics | aggregate: softeval / lm-eval |", "|---" * 9 + "|"]
    for r in rows:
        agg = "; ".join(f"{key} {v['softeval']:.4f} / {v['lm_eval']:.4f}" for key, v in r["aggregates"].items())
        lines.append(f"| {r['task']} | {r['shots']} | {r['items']} | {r['same_prompt_text']} | {r['same_prompt_ids']} "
                     f"| {r['same_output']} | {r['same_filtered']} | {r['same_metrics']} | {agg} |")
    return "\n".join(lines)


def hf_model(lm):
    """lm-eval's HF model around softeval's loaded model object (batch 1: no padding on either side)."""
    from lm_eval.models.huggingface import HFLM

    for name in ("lm_eval", "lm-eval"):
        logging.getLogger(name).setLevel(logging.ERROR)
    return HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=1, device=str(lm.device),
                max_length=lm.max_length)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--setting", action="append", metavar="TASK:SHOTS:ITEMS",
                    help="an lm-eval task, its shots and items (given once per setting)")
    args = ap.parse_args()
    settings = args.setting or ["gsm8k:0:5", "gsm8k:5:5", "arc_easy:0:40", "mmlu_abstract_algebra:5:40"]
    lm = load_model(args.model, device="cpu")
    hflm = hf_model(lm)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [compare(lm, hflm, t, int(k), int(n), Path(tmp)) for t, k, n in (s.split(":") for s in settings)]
    print(table(rows))
    print(json.dumps({"model": args.model, "settings": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
