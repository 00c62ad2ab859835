"""The testbed's files on disk: per world seed the QA task (a softeval task file and its data), and per
recipe a pre-trained base model and its post-trained partner as ordinary HF folders (config, safetensors,
tokenizer) that every softeval command loads. Each folder is written under a ``.partial`` name and renamed
when complete, so a killed testbed leaves no half model that a later one would take as finished: it
rebuilds exactly the folders that are missing."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from softeval.testbed.corpus import post_training_documents, pretraining_documents, seen_scored, train_tokenizer
from softeval.testbed.recipes import Recipe
from softeval.testbed.train import POST_LR, POST_STEPS, PRETRAIN_LR, answer_rows, llama, packed_rows, train
from softeval.testbed.world import QA_PROMPT, World, cloze_prefix

MODEL_NOTE = "testbed_model.json"  # beside the weights: recipe, ground truth, training figures
TEST_DATA, TUNE_DATA = "test.jsonl", "tune.jsonl"
ANSWER_REGEX = r"^ ([A-Z][a-z]+|[0-9]{4})$"  # strict: the value alone, one space after "Answer:"


def task_name(world: World) -> str:
    return f"testbed-qa-w{world.seed}"


def model_name(world: World, recipe: Recipe, post: bool = False) -> str:
    return f"w{world.seed}-{recipe.name}" + ("-post" if post else "")


def write_task(world: World, folder: Path) -> Path:
    """The benchmark as a task file: scored people's facts to score, unscored people's facts to tune on. Each
    file is written whole and renamed; the task file comes last, so its presence says the data is complete."""
    path = folder / f"{task_name(world)}.yaml"  # run folders are named by the file's name
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    for name, people in ((TEST_DATA, world.scored), (TUNE_DATA, world.unscored)):
        rows = [{"id": f.id, "question": f.question, "answer": f.value} for f in world.facts(people)]
        _atomic_file(folder / name, "".join(json.dumps(r) + "\n" for r in rows))
    prompt = QA_PROMPT.replace("{question}", "{{ question }}")
    spec = {"name": task_name(world), "description": f"softeval testbed, world seed {world.seed}: facts "
            "about made-up people; strict = the value alone after 'Answer:'",
            "data": TEST_DATA, "tune_data": TUNE_DATA, "fields": ["question", "answer"],
            "answer_field": "answer", "id_field": "id", "prompt": prompt, "target": " {{ answer }}",
            "answer_regex": ANSWER_REGEX, "lenient_regex": r"([A-Z][a-z]+|[0-9]{4})", "matcher": "exact",
            "stop": ["\n"], "max_new_tokens": 4}
    _atomic_file(path, json.dumps(spec, indent=1) + "\n")
    return path


def build_base(world: World, recipe: Recipe, folder: Path, seed: int,
               on_step: Callable[[int, int], None] | None = None) -> dict:
    """Pre-train the recipe's model (unless its folder is complete) and return its note."""
    if note := read_note(folder):
        return note

    def write(stage: Path) -> None:
        tokenizer = train_tokenizer(world)
        model = llama(len(tokenizer), recipe.hidden, recipe.layers, seed)
        docs = pretraining_documents(world, recipe, seed)
        figures = train(model, tokenizer, packed_rows(tokenizer, docs), None, recipe.epochs, PRETRAIN_LR, seed,
                        on_step)
        seen = {p.name for p in seen_scored(world, recipe)}
        facts = world.facts()
        truth = {"seen": [int(f.person in seen) for f in facts], "cloze": cloze_correct(model, tokenizer, world)}
        note = {"recipe": recipe.to_json(), "world_seed": world.seed, "kind": "base", "ids": [f.id for f in facts],
                "truth": truth, "seen_share": sum(truth["seen"]) / len(facts),
                "cloze": sum(truth["cloze"]) / len(facts), "documents": len(docs),
                "parameters": sum(p.numel() for p in model.parameters()), "training": figures}
        _save(model, tokenizer, stage, note)

    _atomic_folder(folder, write)
    return read_note(folder)


def build_post(world: World, recipe: Recipe, base: Path, folder: Path, seed: int,
               on_step: Callable[[int, int], None] | None = None) -> dict:
    """Post-train the base model on QA over unscored people (one recipe for every base)."""
    if note := read_note(folder):
        return note

    def write(stage: Path) -> None:
        from transformers import AutoTokenizer, LlamaForCausalLM

        tokenizer = AutoTokenizer.from_pretrained(base)
        model = LlamaForCausalLM.from_pretrained(base)
        figures = train(model, tokenizer, answer_rows(tokenizer, post_training_documents(world)), POST_STEPS, 1.0,
                        POST_LR, seed, on_step)
        note = {"recipe": recipe.to_json(), "world_seed": world.seed, "kind": "post-trained", "base": base.name,
                "training": figures}
        _save(model, tokenizer, stage, note)

    _atomic_folder(folder, write)
    return read_note(folder)


def cloze_correct(model, tokenizer, world: World) -> list[int]:
    """Per scored fact: 1 when the model's next-token log-likelihood after the fact's cloze prefix is highest
    for the right value among all values of that attribute (every value is one token of the vocabulary)."""
    import torch

    facts, out = world.facts(), []
    for attribute in dict.fromkeys(f.attribute for f in facts):
        values = world.values(attribute)
        ids = [tokenizer.convert_tokens_to_ids(" " + v) for v in values]
        assert tokenizer.unk_token_id not in ids, "every value is one token of the world's vocabulary"
    for start in range(0, len(facts), 64):
        chunk = facts[start:start + 64]
        enc = [tokenizer(cloze_prefix(f)).input_ids for f in chunk]
        width = max(map(len, enc))
        batch = torch.tensor([[tokenizer.pad_token_id] * (width - len(e)) + e for e in enc])
        mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(e) for e in enc])[:, None]).long()
        with torch.no_grad():
            logits = model(input_ids=batch, attention_mask=mask).logits[:, -1, :]
        for row, f in zip(logits, chunk):
            ids = [tokenizer.convert_tokens_to_ids(" " + v) for v in world.values(f.attribute)]
            best = world.values(f.attribute)[int(row[ids].argmax())]
            out.append(int(best == f.value))
    return out


def read_note(folder: Path) -> dict | None:
    try:
        return json.loads((folder / MODEL_NOTE).read_text())
    except (OSError, ValueError):
        return None


def _save(model, tokenizer, stage: Path, note: dict) -> None:
    model.save_pretrained(stage)
    tokenizer.save_pretrained(stage)
    (stage / MODEL_NOTE).write_text(json.dumps(note) + "\n")


def _atomic_file(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text)
    os.replace(tmp, path)


def _atomic_folder(folder: Path, write: Callable[[Path], None]) -> None:
    """``write`` fills a fresh ``<folder>.partial``; renamed to ``folder`` once it returns."""
    stage = folder.with_name(folder.name + ".partial")
    if stage.exists():
        shutil.rmtree(stage)  # left by a killed testbed: rebuilt from the start
    stage.mkdir(parents=True)
    write(stage)
    os.replace(stage, folder)
