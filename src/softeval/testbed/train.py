"""Training the testbed's tiny causal LMs: a Llama pre-trained from scratch on a recipe's corpus, and its
post-trained partner (the base fine-tuned on QA over unscored people). Documents are packed into blocks of
``BLOCK`` tokens, each document opened by <bos> and closed by <eos>; AdamW with a linear decay."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

BLOCK = 64
BATCH = 16
PRETRAIN_LR, POST_LR = 3e-3, 1e-3
POST_STEPS = 300


def llama(vocab_size: int, hidden: int, layers: int, seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=4 * hidden,
                         num_hidden_layers=layers, num_attention_heads=max(1, hidden // 32),
                         num_key_value_heads=max(1, hidden // 32), max_position_embeddings=512,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=True)
    return LlamaForCausalLM(config)


def token_stream(tokenizer, documents: list[str]) -> list[int]:
    eos = tokenizer.eos_token_id
    out: list[int] = []
    for ids in tokenizer(documents).input_ids:  # each begins with <bos>
        out += ids + [eos]
    return out


Rows = list[tuple[list[int], list[int] | None]]  # what training draws its batches from: (ids, labels or None)


def packed_rows(tokenizer, documents: list[str]) -> Rows:
    """Pre-training's rows: the documents packed into blocks of ``BLOCK`` tokens, the loss on every token."""
    stream = token_stream(tokenizer, documents)
    n_blocks = max(1, len(stream) // BLOCK)
    return [(stream[i * BLOCK:(i + 1) * BLOCK], None) for i in range(n_blocks)]


def answer_rows(tokenizer, documents: list[str]) -> Rows:
    """Post-training's rows: one per document, the loss only on the tokens after "Answer:"."""
    return [_answer_row(tokenizer, d) for d in documents]


def train(model, tokenizer, rows: Rows, steps: int | None, epochs: float, lr: float, seed: int,
          on_step: Callable[[int, int], None] | None = None) -> dict:
    """Train ``model`` in place on ``rows`` (``packed_rows`` or ``answer_rows``); ``steps`` (or ``epochs``
    passes over the rows) of ``BATCH`` rows. Returns the step count, the final loss and the seconds."""
    import torch

    torch.manual_seed(seed)
    rng = random.Random(seed)
    total = steps if steps is not None else max(1, round(epochs * len(rows) / BATCH))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 20) * (1 - s / total))
    model.train()
    started, loss_value, order = time.perf_counter(), float("nan"), []
    for step in range(total):
        if len(order) < BATCH:
            order += rng.sample(range(len(rows)), len(rows))
        batch, order = [rows[i] for i in order[:BATCH]], order[BATCH:]
        ids, labels = _tensors(batch, tokenizer.pad_token_id)
        loss = model(input_ids=ids, labels=labels).loss  # right padding: no mask needed
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        loss_value = float(loss.detach())
        if on_step:
            on_step(step + 1, total)
    model.eval()
    return {"steps": total, "final_loss": round(loss_value, 4), "seconds": round(time.perf_counter() - started, 1)}


def _answer_row(tokenizer, document: str) -> tuple[list[int], list[int]]:
    prompt, answer = document.rsplit(" ", 1)
    ids = tokenizer(prompt).input_ids
    full = tokenizer(prompt + " " + answer).input_ids + [tokenizer.eos_token_id]
    return full, [-100] * len(ids) + full[len(ids):]


def _tensors(batch, pad_id: int):
    import torch

    width = max(len(ids) for ids, _ in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for r, (row, lab) in enumerate(batch):
        ids[r, :len(row)] = torch.tensor(row)
        labels[r, :len(row)] = torch.tensor(lab if lab is not None else row)
    return ids, labels
