"""Does softeval score multiple choice as lm-evaluation-harness does? Cloze and letters, item by item.

Not a test. Both sides run in one process on the same loaded model object (lm-eval's ``HFLM`` is
given it), the same items (softeval's seeded ``--limit`` pick) and the same prompt strings: lm-eval
gets softeval's rendered prompts and options through a ``multiple_choice`` task YAML (written to a
temp dir, reading a local JSONL), so what is compared is the scoring, not the prompt wording.

- cloze: softeval's ``cloze_accuracy`` / ``cloze_accuracy_norm`` (``Prompter.cloze_ids`` +
  ``loglik.option_logprobs``, each item's context once; picks by ``scoring.add_cloze``) against
  lm-eval's ``acc`` / ``acc_norm`` from its own ``process_results`` (choices = the option texts,
  ``target_delimiter: " "``);
- letters: softeval's ``letter_loglik_accuracy`` (``Prompter.ids`` / ``option_ids``) against lm-eval's
  ``acc`` with choices ``A``, ``B``, ... after the lettered prompt (lm-eval's MMLU formulation).

Reported per view: items with the same argmax (raw and per character), both accuracies, the largest
log-likelihood difference, and how many (context, continuation) pairs tokenize identically on both
sides. The last printed line is JSON.

    .venv/bin/python benchmarks/bench_agreement.py --model gemma-3-270m --task arc_easy --n 300
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

import torch

from softeval.lm import loglik
from softeval.lm.models import load_model
from softeval.run.pipeline import ITEM_SEED
from softeval.run.prompting import Prompter, use_chat_template
from softeval.run.scoring import add_cloze, add_letter_loglik
from softeval.tasks import get_task
from softeval.tasks.base import LETTERS
from softeval.tasks.data import seeded_subset


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


def lmeval_task(folder: Path, name: str, docs: list[dict], delimiter: str):
    """A multiple_choice task over ``docs`` ({prompt, choices, label}) built by lm-eval's TaskManager."""
    from lm_eval.tasks import TaskManager, get_task_dict

    data = folder / f"{name}.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs))
    lines = [f"task: {name}", "dataset_path: json", "dataset_kwargs:", "  data_files:",
             f"    test: {json.dumps(str(data))}", "test_split: test", "doc_to_text: prompt",
             "output_type: multiple_choice", "doc_to_choice: choices", "doc_to_target: label",
             f"target_delimiter: {json.dumps(delimiter)}", "metric_list:", "  - metric: acc", "  - metric: acc_norm"]
    (folder / f"{name}.yaml").write_text("\n".join(lines) + "\n")
    manager = TaskManager(include_path=str(folder), include_defaults=False, verbosity="ERROR")
    task = get_task_dict([name], manager)[name]
    task.build_all_requests(limit=None, rank=0, world_size=1)
    return task


def lmeval_scores(hflm, task) -> tuple[list[list[float]], list[dict]]:
    """lm-eval's log-likelihoods per doc and its own acc / acc_norm per doc (``process_results``)."""
    instances = sorted(task.instances, key=lambda r: (r.doc_id, r.idx))
    out = hflm.loglikelihood(instances, disable_tqdm=True)
    by_doc: dict[int, list] = {}
    for inst, result in zip(instances, out):
        by_doc.setdefault(inst.doc_id, []).append(result)
    docs = list(task.test_docs())
    lls = [[float(ll) for ll, _ in by_doc[i]] for i in range(len(docs))]
    metrics = [task.process_results(docs[i], by_doc[i]) for i in range(len(docs))]
    return lls, metrics


def argmax(values) -> int:
    return max(range(len(values)), key=lambda j: values[j])


def compare_view(view: str, lm, hflm, task, prompter: Prompter, items, folder: Path, batch_size: int) -> dict:
    delimiter = "" if prompter.chat else " "
    pairs, docs = view_inputs(view, task, prompter, items)
    t0 = time.perf_counter()
    ours = loglik.option_logprobs(lm, [c for c, _ in pairs], [o for _, o in pairs], batch_size=batch_size)
    t_ours = time.perf_counter() - t0
    lt = lmeval_task(folder, f"agree_{view}", docs, delimiter)
    t0 = time.perf_counter()
    theirs, their_metrics = lmeval_scores(hflm, lt)
    t_theirs = time.perf_counter() - t0
    same_tokens = sum(
        1 for (ctx, opts), doc in zip(pairs, docs) for opt, choice in zip(opts, doc["choices"])
        if hflm._encode_pair(doc["prompt"], delimiter + choice) == (ctx, opt))
    n_pairs = sum(len(d["choices"]) for d in docs)
    correct, worst, examples = agreement(view, task, items, docs, ours, theirs)
    n = len(items)
    lm_acc = sum(m["acc"] for m in their_metrics) / n
    lm_norm = sum(m["acc_norm"] for m in their_metrics) / n
    row = {"view": view, "n": n, "softeval_acc": correct["ours_acc"] / n, "lmeval_acc": lm_acc,
           "softeval_acc_norm": correct["ours_acc_norm"] / n, "lmeval_acc_norm": lm_norm,
           "same_argmax": correct["same_argmax"] / n, "same_argmax_norm": correct["same_argmax_norm"] / n,
           "max_abs_loglik_diff": worst, "identical_tokenization": f"{same_tokens}/{n_pairs}",
           "seconds_softeval": round(t_ours, 1), "seconds_lmeval": round(t_theirs, 1),
           "argmax_mismatches": examples}
    log(f"{view}: n={n} acc softeval {row['softeval_acc']:.4f} lm-eval {lm_acc:.4f}; acc_norm softeval "
        f"{row['softeval_acc_norm']:.4f} lm-eval {lm_norm:.4f}; same argmax {correct['same_argmax']}/{n} "
        f"(norm {correct['same_argmax_norm']}/{n}); max |dLL| {worst:.2e}; tokens {row['identical_tokenization']}; "
        f"{t_ours:.0f}s vs {t_theirs:.0f}s")
    return row


def view_inputs(view: str, task, prompter: Prompter, items) -> tuple[list, list[dict]]:
    """A view's (context ids, option ids) per item, as softeval scores them, and the same items as lm-eval
    documents (prompt, choices, label)."""
    if view == "cloze":
        texts = [prompter.cloze_text(e, "zero-shot") for e in items]
        choices = [task.cloze_options(e) for e in items]
        pairs = [prompter.cloze_ids(e, "zero-shot") for e in items]
    else:
        texts = [prompter.text(e, "zero-shot") for e in items]
        choices = [(list(LETTERS[: len(e.options)]), LETTERS.index(e.gold)) for e in items]
        pairs = [(prompter.ids(e, "zero-shot"), prompter.option_ids(e)) for e in items]
    return pairs, [{"prompt": t, "choices": c, "label": g} for t, (c, g) in zip(texts, choices)]


def agreement(view: str, task, items, docs: list[dict], ours, theirs) -> tuple[dict, float, list]:
    """Per item, softeval's picks (raw and length-normalised) against the gold and lm-eval's: the counts, the
    largest log-likelihood difference and up to three items whose picks differ. Checks on the way that the run
    writer makes the same picks (``add_cloze``, ``add_letter_loglik``)."""
    correct = {"ours_acc": 0, "ours_acc_norm": 0, "same_argmax": 0, "same_argmax_norm": 0}
    worst, examples = 0.0, []
    for example, doc, mine, other in zip(items, docs, ours, theirs):
        lengths = [max(1, len(c)) for c in doc["choices"]]
        norm_mine = argmax([s / n for s, n in zip(mine, lengths)])
        norm_other = argmax([s / n for s, n in zip(other, lengths)])
        if view == "cloze":  # the picks the run writer makes
            sample = add_cloze({}, task, example, mine)
            assert sample["cloze_correct"] == (argmax(mine) == doc["label"])
            assert sample["cloze_norm_correct"] == (norm_mine == doc["label"])
        else:
            sample = add_letter_loglik({}, example, mine)
            assert sample["letter_loglik_correct"] == (argmax(mine) == doc["label"])
        correct["ours_acc"] += argmax(mine) == doc["label"]
        correct["ours_acc_norm"] += norm_mine == doc["label"]
        correct["same_argmax"] += argmax(mine) == argmax(other)
        correct["same_argmax_norm"] += norm_mine == norm_other
        worst = max(worst, max(abs(a - b) for a, b in zip(mine, other)))
        if argmax(mine) != argmax(other) and len(examples) < 3:
            examples.append({"id": example.id, "softeval": [round(x, 4) for x in mine],
                             "lmeval": [round(x, 4) for x in other]})
    return correct, worst, examples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--task", required=True)
    ap.add_argument("--n", type=int, default=100, help="items (softeval's seeded --limit pick)")
    ap.add_argument("--views", default="cloze,letters", help="cloze, letters or both")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--chat-template", default="off", choices=["auto", "on", "off"])
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from lm_eval.models.huggingface import HFLM

    for name in ("lm_eval", "lm-eval"):
        logging.getLogger(name).setLevel(logging.ERROR)
    lm = load_model(args.model, device="cpu")
    task = get_task(args.task)
    items = seeded_subset(task.load("offline").eval, args.n, ITEM_SEED)
    prompter = Prompter(lm, task, use_chat_template(lm, args.chat_template), [])
    hflm = HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=args.batch_size, device=str(lm.device),
                max_length=lm.max_length)
    views = [v.strip() for v in args.views.split(",") if v.strip()]
    if not task.multiple_choice:
        views = [v for v in views if v != "letters"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for view in views:
            rows.append(compare_view(view, lm, hflm, task, prompter, items, Path(tmp), args.batch_size))
    result = {"model": args.model, "task": args.task, "n": len(items), "chat_template": prompter.chat,
              "torch_threads": torch.get_num_threads(), "views": rows}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
