"""Read a model's output back with the task's extractors and score it against the gold answer; the
log-likelihood references beside it (the cloze options, the letters in permuted orders), asked of an engine
(``Engine.loglikelihood``): nothing here calls a model."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import replace

import torch

from softeval.lm.engine import Engine
from softeval.run.prompting import Prompter
from softeval.tasks.base import LETTERS, Example, Task, Unscorable

PERMUTATION_SEED = 0  # option orders depend on this and the item only: the same for every model, method and seed


def score_output(task: Task, example: Example, output: str) -> dict:
    """One sample row. A matcher that runs past its time limit (``Unscorable``) leaves the item not
    correct and marks it ``unscorable``, counted in results.json; it never stalls the run. So does an
    extractor that gives up (a task file's regex past its time limit): it reads no answer."""
    unscorable = []

    def read(extract) -> str | None:
        try:
            return extract(output, example)
        except Unscorable as err:
            unscorable.append(err)
            return None

    strict = read(task.strict)
    lenient = read(task.lenient)

    def match(answer) -> bool:
        try:
            return bool(task.match(answer, example))
        except Unscorable:
            unscorable.append(answer)
            return False

    sample = {
        "id": example.id,
        "output": output,
        "strict": strict,
        "lenient": lenient,
        "gold": example.gold,
        "format_ok": strict is not None,
        "correct": match(strict),
        "lenient_correct": match(lenient),
    }
    if unscorable:
        sample["unscorable"] = True
    item_metrics = task.extra.get("item_metrics")  # a task source's own per-item metrics (lm-eval's)
    if item_metrics is not None:
        sample["lm_eval"] = item_metrics(output, example)
    f1 = task.extra.get("f1")
    if f1 is not None:
        sample["f1"] = float(f1(strict, example))
    return sample


def _argmax(values: Sequence[float]) -> int:
    return max(range(len(values)), key=lambda j: values[j])  # first of equal maxima, as numpy's argmax


def add_letter_loglik(sample: dict, example: Example, option_scores: Sequence[float]) -> dict:
    """The option letter with the highest log-likelihood after the lettered prompt."""
    best = _argmax(option_scores)
    sample["letter_loglik_pred"] = LETTERS[best]
    sample["letter_loglik_correct"] = LETTERS[best] == example.gold
    return sample


def add_cloze(sample: dict, task: Task, example: Example, scores: Sequence[float]) -> dict:
    """Cloze picks: the option whose text has the highest summed log-probability (raw), and the
    highest per character of the option's text (lm-eval's ``acc_norm``: the text's length without
    the space before it)."""
    texts, gold = task.cloze_options(example)
    norm = [score / max(1, len(text)) for score, text in zip(scores, texts)]
    name = (lambda j: texts[j]) if task.cloze_choices is not None else (lambda j: LETTERS[j])
    raw_pick, norm_pick = _argmax(scores), _argmax(norm)
    sample.update(cloze_scores=[float(x) for x in scores], cloze_pred=name(raw_pick), cloze_correct=raw_pick == gold,
                  cloze_norm_pred=name(norm_pick), cloze_norm_correct=norm_pick == gold)
    return sample


def permutations_for(n_options: int, k: int, item_id: str) -> list[tuple[int, ...]]:
    """``k`` distinct seeded orders of ``n_options`` options, none the original; ``k`` is at most
    ``n_options! - 1`` (``Job.prepare`` refuses a larger --permutations). ``order[j]`` is the original
    index of the option shown at position j."""
    if k > math.factorial(n_options) - 1:
        raise ValueError(f"{n_options} options have {math.factorial(n_options) - 1} other orders, not {k}")
    rng = random.Random(f"{PERMUTATION_SEED}/{item_id}")
    identity = tuple(range(n_options))
    if math.factorial(n_options) <= 24:  # few enough to draw from all of them without repeats
        others = [p for p in itertools.permutations(identity) if p != identity]
        return rng.sample(others, k)
    seen: list[tuple[int, ...]] = []
    while len(seen) < k:
        order = list(identity)
        rng.shuffle(order)
        if tuple(order) != identity and tuple(order) not in seen:
            seen.append(tuple(order))
    return seen


def permuted(example: Example, order: Sequence[int]) -> Example:
    """The item with its options shown in ``order``, the gold letter moved with its option."""
    options = tuple(example.options[j] for j in order)
    gold = LETTERS[list(order).index(LETTERS.index(example.gold))]
    return replace(example, options=options, gold=gold)


def add_permutations(sample: dict, example: Example, picks: Sequence[str]) -> dict:
    """Label-prior check: the letter-likelihood pick in the original order and in every permuted
    order, as original letters. Consistent: the same option content every time; circular correct:
    the gold option every time (OpenCompass's CircularEval)."""
    every = [sample.get("letter_loglik_pred"), *picks]
    sample["permutation_picks"] = every
    sample["permutation_consistent"] = len(set(every)) == 1
    sample["circular_correct"] = all(p == example.gold for p in every)
    return sample


def cloze_scores(engine: Engine, prompter: Prompter, method: str, examples: list[Example],
                 soft: torch.Tensor | None) -> list[list[float]]:
    """Summed log-probability of each option's text after the item's cloze prompt, under the
    method's own context (its shots, its soft prompt), from ``engine`` (the HF engine runs each item's
    context once for all its options)."""
    pairs = [prompter.cloze_ids(e, method) for e in examples]
    return engine.loglikelihood([c for c, _ in pairs], [o for _, o in pairs], soft=soft)


def permutation_picks(engine: Engine, prompter: Prompter, method: str, examples: list[Example],
                      soft: torch.Tensor | None, k: int) -> list[list[str]]:
    """Per item, the original letter of the option the letters' log-likelihood picks in each of
    ``k`` (``--permutations``) seeded orders of its options (the lettered prompt re-rendered each time)."""
    orders = [permutations_for(len(e.options), k, e.id) for e in examples]
    flat = [(n, order) for n, item_orders in enumerate(orders) for order in item_orders]
    shown = [permuted(examples[n], order) for n, order in flat]
    scores = engine.loglikelihood([prompter.ids(e, method) for e in shown], [prompter.option_ids(e) for e in shown],
                                  soft=soft)
    picks: list[list[str]] = [[] for _ in examples]
    for (n, order), item_scores in zip(flat, scores):
        picks[n].append(LETTERS[order[_argmax(item_scores)]])
    return picks
