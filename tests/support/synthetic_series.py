"""A trained checkpoint series for the series tests: a tiny model pre-trained inside the test on a fact
table, saved every ``save_every`` steps as ``checkpoint-<step>/`` (``save_pretrained``), and a task file
that asks for those facts in a format the pre-training text rarely uses.

Why this task tells format and knowledge apart: the corpus states each fact as a document of its own
(BOS, the fact, EOS): most as ``key=value``, a minority in another register, ``#key=value;``. The
task's prompt is ``key=`` and its strict format the value followed by ``;`` (``answer_regex:
^(\\d);``); the lenient answer is any digit. So the *knowledge* (which digit) is learnt gradually
from the corpus, fact by fact, while the *format* (the ``;``) is known to the model but tied to a cue
the prompt lacks: zero-shot output stops after the digit, and a soft prompt learns the cue. Held-out facts (the
task's test split) are in the corpus too: the soft prompt is tuned on other facts, so it can teach
the format but not the facts.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import torch
from tiny import tiny_model, tiny_tokenizer

KEY_LETTERS = "abcdefghijklmnop"


def fact_table(n_facts: int = 48, seed: int = 0) -> dict[str, str]:
    rng = random.Random(seed)
    table: dict[str, str] = {}
    while len(table) < n_facts:
        key = "".join(rng.choice(KEY_LETTERS) for _ in range(3))
        table.setdefault(key, str(rng.randrange(10)))
    return table


def write_task(folder: Path, table: dict[str, str], n_tune: int = 24) -> Path:
    """The task file (and its data file) asking for the facts: strict = the digit then ';'."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"fact-{i}", "key": k, "value": v} for i, (k, v) in enumerate(table.items())]
    (folder / "facts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {
        "name": "facts", "description": "synthetic fact table: the value digit, then ';'",
        "data": "facts.jsonl", "fields": ["key", "value"], "answer_field": "value", "id_field": "id",
        "instruction": "", "prompt": "{{ key }}=", "target": "{{ value }};",
        "answer_regex": r"^(\d);", "lenient_regex": r"(\d)", "matcher": "exact",
        "split": {"seed": 1, "n_tune": n_tune}, "stop": ["\n"], "max_new_tokens": 3,
    }
    path = folder / "facts.yaml"
    path.write_text(json.dumps(spec, indent=2))
    return path


def corpus_batch(table: dict[str, str], rng: random.Random, batch: int, cued: float) -> list[str]:
    """One fact per document. A ``cued`` share is written ``#key=value;`` (a register with its own
    format), the rest ``key=value``: the format exists in the corpus, tied to a cue the task's prompt lacks."""
    keys = list(table)
    docs = []
    for key in (rng.choice(keys) for _ in range(batch)):
        docs.append(f"#{key}={table[key]};" if rng.random() < cued else f"{key}={table[key]}")
    return docs


@dataclass(frozen=True)
class Pretraining:
    """How the series' tiny Llama is pre-trained on the fact corpus: ``steps`` of AdamW at ``lr`` on ``batch``
    documents, a ``cued`` share of them in the ``#key=value;`` register, a checkpoint every ``save_every`` steps;
    the model's size (``hidden``, ``layers``) and the seed of its init and of the corpus draws."""

    steps: int = 400
    save_every: int = 100
    seed: int = 0
    cued: float = 0.3
    lr: float = 2e-3
    batch: int = 32
    hidden: int = 32
    layers: int = 2


def train_series(folder: Path, table: dict[str, str], settings: Pretraining = Pretraining()) -> list[Path]:
    """Pre-train a tiny Llama from scratch on the fact corpus; save ``checkpoint-<step>/`` every
    ``save_every`` steps (model and tokenizer). Returns the checkpoint folders, in step order.

    One thread: ops this small gain nothing from two, and on a busy machine two spinning threads made
    the same training 40x slower (measured: 460 s against 11 s)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(folder, table, settings)
    finally:
        torch.set_num_threads(threads)


def _padded(tok, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """The documents' token ids, each ended by EOS and padded to the longest, and their attention mask."""
    docs = [tok(text).input_ids + [tok.eos_token_id] for text in texts]
    width = max(len(d) for d in docs)
    ids = torch.tensor([d + [tok.pad_token_id] * (width - len(d)) for d in docs])
    mask = torch.tensor([[1] * len(d) + [0] * (width - len(d)) for d in docs])
    return ids, mask


def _save(model, tok, path: Path) -> Path:
    model.eval()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    model.train()
    return path


def _train(folder: Path, table: dict[str, str], settings: Pretraining) -> list[Path]:
    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    tok = tiny_tokenizer()
    model = tiny_model(len(tok), seed=settings.seed, layers=settings.layers, hidden=settings.hidden,
                       init_range=0.02)
    model.requires_grad_(True)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.0)
    saved = []
    for step in range(1, settings.steps + 1):
        ids, mask = _padded(tok, corpus_batch(table, rng, settings.batch, settings.cued))
        loss = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % settings.save_every == 0:
            saved.append(_save(model, tok, folder / f"checkpoint-{step}"))
    return saved
