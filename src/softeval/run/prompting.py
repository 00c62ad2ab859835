"""Turn task items into token ids for each method, as its spec says (softeval.methods): the shots before the item
when it takes them, its frame of the item's question when it has one.

A method that tunes a soft prompt sees exactly the bare input (the soft prompt is added by the engine), so the
built-in methods differ only in what comes before the question.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import partial

from jinja2 import TemplateError

from softeval.constants import BASE, POST_TRAINED
from softeval.errors import UserError
from softeval.lm.models import LoadedModel, end_of_turn_id
from softeval.methods import MethodSpec, spec_of
from softeval.run.config import COMMAND_LINE, Spelling
from softeval.run.validate import check_option
from softeval.tasks.base import Example, Task


def use_chat_template(lm: LoadedModel, setting: str, spelling: Spelling = COMMAND_LINE) -> bool:
    """``auto``: on only for a post-trained model whose tokenizer has a chat template; never
    silently for a base model. ``on`` without a template is an error (naming the option as ``spelling``
    spells it: a flag, or a sweep file's key)."""
    check_option("chat_template", setting)
    if setting == "off":
        return False
    if setting == "on":
        if not lm.has_chat_template:
            raise UserError(f"{spelling.setting('chat_template', 'on')}, but the tokenizer of {lm.name} has no "
                            "chat template")
        return True
    return lm.has_chat_template and lm.kind == POST_TRAINED  # auto


def guessed_kind_warning(lm: LoadedModel) -> str | None:
    """The warning for a kind guessed from the model's name as base while its tokenizer has a chat
    template: post-trained models have one, and a post-trained model taken as base is scored without
    its template (zephyr-7b-beta's name says nothing of its training). None when there is no doubt."""
    if lm.kind_source != "guessed from name" or lm.kind != BASE or not lm.has_chat_template:
        return None
    return (f"WARNING: {lm.name} is taken as a BASE model from its name alone, but its tokenizer has a chat "
            "template, which post-trained models have. If it is post-trained, rerun with --kind post-trained "
            "(its chat template is then used); pass --kind base to confirm and silence this. "
            "Results record the kind and its source (model_kind_source).")


def check_shots(k: int, n_tune: int, task: str = "", spelling: Spelling = COMMAND_LINE,
                pool: str = "tuning items") -> None:
    """Few-shot draws its ``k`` shots from the ``n_tune`` items of ``pool`` (of ``task``; default its
    tuning items): no more than there are."""
    if k > n_tune:
        raise UserError(f"{spelling.setting('shots', k)} is more than the {n_tune} {pool}"
                        + (f" of {task}" if task else "") + f": use {spelling.setting('shots', n_tune)} or less")


def pick_shots(pool: list[Example], k: int, seed: int) -> list[Example]:
    """k solved examples drawn with a fixed seed from the tuning split (the same for every item)."""
    check_shots(k, len(pool))
    return random.Random(seed).sample(pool, k)


@dataclass
class Prompter:
    """Renders and tokenizes prompts and targets for one (model, task) pair."""

    lm: LoadedModel
    task: Task
    chat: bool
    shots: list[Example]
    budget: int = 1 << 30  # most prompt tokens the model's context leaves room for
    truncated: set = field(default_factory=set)  # ids of items whose prompt was cut from the left
    # the scored items: a task that renders its own prompts (Task.contexts) renders theirs together
    items: list[Example] = field(default_factory=list)
    _rendered: dict = field(default_factory=dict)  # (shots, item id) -> the task's own prompt

    def shots_of(self, spec: MethodSpec | None) -> list[Example]:
        """The solved shots put before each item by the method of ``spec`` (None: the bare prompt, none)."""
        return self.shots if spec is not None and spec.shots else []

    def full_text(self, example: Example, method: str | None = None) -> str:
        """The rendered prompt of ``method`` (None: the bare prompt): instruction, its shots, the item, framed as its
        spec says (in the chat template when it is on); or the task's own (``Task.contexts``: the scored items'
        prompts rendered together, in one call), framed as a whole."""
        spec = _spec(method)
        shots = self.shots_of(spec)
        if self.task.contexts is not None:
            return _framed(spec, self._own_text(example, len(shots)))
        instruction = self.task.instruction if self.task.instruction_shown else ""
        return self._assemble(instruction,
                              [(_framed(spec, self.task.render(s)), self.task.target(s)) for s in shots],
                              _framed(spec, self.task.render(example)))

    def _assemble(self, instruction: str, solved: list[tuple[str, str]], item: str) -> str:
        """Without a chat template: instruction, solved shots and the item as one text, blank lines
        between. With one, as lm-eval's ``--apply_chat_template --fewshot_as_multiturn`` builds it:
        the instruction as the system turn, each shot a user turn and its answer an assistant turn,
        the item a user turn; the task's answer cue (``Task.split_cue``) opens each assistant turn,
        so the item's prompt ends with the cue in the assistant's turn (lm-eval's ``gen_prefix``)."""
        if not self.chat:
            return "\n\n".join(p for p in [instruction, *(q + a for q, a in solved), item] if p)
        turns = []
        for question, answer in solved:
            question, cue = self.task.split_cue(question)
            turns += [{"role": "user", "content": question},
                      {"role": "assistant", "content": cue + answer if cue else answer.lstrip()}]
        question, cue = self.task.split_cue(item)
        turns.append({"role": "user", "content": question})
        if cue:
            turns.append({"role": "assistant", "content": cue})
        return chat_text(self.lm.tokenizer, instruction, turns)

    def _own_text(self, example: Example, k: int) -> str:
        if (k, example.id) not in self._rendered:
            scored = {e.id for e in self.items}
            group = self.items if example.id in scored else [example]
            chat = source_chat(self.lm.tokenizer) if self.chat else None
            self._rendered.update(((k, e.id), text) for e, text in zip(group, self.task.contexts(group, k, chat)))
        return self._rendered[(k, example.id)]

    def text(self, example: Example, method: str | None = None) -> str:
        """The prompt the model reads: trailing spaces go to the answer (``encode_pair``), so the
        prompt generated from is the prompt tuned and scored on."""
        return _move_spaces(self.full_text(example, method), "")[0]

    def ids(self, example: Example, method: str | None = None) -> list[int]:
        return self._fit(self.encode(self.text(example, method), special=not self.chat), example)

    def _fit(self, ids: list[int], example: Example) -> list[int]:
        if len(ids) <= self.budget:
            return ids
        # Too long for the context: cut from the left (the question and answer prefix are at the
        # end), keeping BOS in front, and count it so the results say how many were cut.
        self.truncated.add(example.id)
        bos = getattr(self.lm.tokenizer, "bos_token_id", None)
        if bos is not None and ids[0] == bos:
            return ids[:1] + ids[len(ids) - self.budget + 1:]
        return ids[len(ids) - self.budget:]

    def target_ids(self, example: Example, method: str | None = None) -> list[int]:
        """The answer in the required format, then the end-of-answer token: what the soft prompt is
        tuned to produce, cut from the joint encoding of prompt + answer (``encode_pair``)."""
        text = self._after(self.task.render(example), self.task.target(example))
        ids = self.continuation_ids(example, method, text)
        end = end_of_answer_id(self.lm, self.chat)
        return ids + [end] if end is not None else ids

    def continuation_ids(self, example: Example, method: str | None, continuation: str) -> list[int]:
        """Ids of ``continuation`` as the model reads it after the item's prompt under ``method``."""
        return encode_pair(self.lm.tokenizer, self.full_text(example, method), continuation,
                           special=not self.chat)[1]

    def _after(self, item: str, continuation: str) -> str:
        """``continuation`` as written after the item's prompt ``item``: a chat prompt without the
        cue ends at the template's generation prompt, a new line, so the continuation's leading
        spaces go; after a cue (or without a chat template) it keeps them (``"Answer:" + " B"``)."""
        return continuation.lstrip() if self.chat and not self.task.split_cue(item)[1] else continuation

    def encode(self, text: str, special: bool) -> list[int]:
        return list(self.lm.tokenizer(text, add_special_tokens=special).input_ids)

    def option_ids(self, example: Example, method: str | None = None) -> list[list[int]]:
        """Each option continuation's ids after the item's prompt (``encode_pair``); the seam is the
        same under every method (the item comes last), so the bare prompt stands for all."""
        conts = [self._after(self.task.render(example), c) for c in self.task.continuations(example)]
        return [self.continuation_ids(example, method, c) for c in conts]

    def cloze_text(self, example: Example, method: str) -> str:
        """The cloze prompt of an item under a method: no instruction (it speaks of letters); few-shot
        puts the shots before it in the same form, each with its gold option's text."""
        if self.task.contexts is not None:
            return self.full_text(example, method)
        solved = []
        for shot in self.shots_of(_spec(method)):
            texts, gold = self.task.cloze_options(shot)
            solved.append((self.task.cloze(shot), " " + texts[gold]))
        return self._assemble("", solved, self.task.cloze(example))

    def cloze_ids(self, example: Example, method: str) -> tuple[list[int], list[list[int]]]:
        """The cloze context's ids and each option's ids (``" " + text``), each option encoded jointly
        with the context and split at the context's length, as lm-eval does: a tokenizer that merges
        the space or the first characters across the seam gives the ids the model would read."""
        context = self.cloze_text(example, method)
        texts, _gold = self.task.cloze_options(example)
        pairs = [encode_pair(self.lm.tokenizer, context, self._after(self.task.cloze(example), " " + t),
                             special=not self.chat) for t in texts]
        ctx = pairs[0][0]
        return self._fit(ctx, example), [cont for _ctx, cont in pairs]


def _spec(method: str | None) -> MethodSpec | None:
    """The spec of ``method`` (an unknown one is a UserError); None for the bare prompt."""
    return None if method is None else spec_of(method)


def _framed(spec: MethodSpec | None, question: str) -> str:
    """``question`` as the method's frame rewrites it (most methods: as it is)."""
    return question if spec is None or spec.frame is None else spec.frame(question)


def chat_text(tokenizer, instruction: str, turns: list[dict]) -> str:
    """``turns`` in the tokenizer's chat template, the instruction as the system turn (folded into the
    first user turn where the template refuses a system role, as Gemma 2's). A last assistant turn
    (the cue) is left open for the model to continue (``continue_final_message``); else the
    template's generation prompt ends the text."""
    open_turn = turns[-1]["role"] == "assistant"
    render = partial(tokenizer.apply_chat_template, tokenize=False, add_generation_prompt=not open_turn,
                     continue_final_message=open_turn)
    if not instruction:
        return render(turns)
    try:
        return render([{"role": "system", "content": instruction}, *turns])
    except TemplateError:
        first = {**turns[0], "content": instruction + "\n\n" + turns[0]["content"]}
        return render([first, *turns[1:]])


def source_chat(tokenizer):
    """The chat renderer a task that renders its own prompts is given (``Task.contexts``), as lm-eval's
    HF model renders: ``render(messages, add_generation_prompt)``, the last assistant turn continued when
    no generation prompt is added; a template that refuses a system role gets the messages without it."""
    def render(messages: list[dict], add_generation_prompt: bool = True) -> str:
        apply = partial(tokenizer.apply_chat_template, tokenize=False, add_generation_prompt=add_generation_prompt,
                        continue_final_message=not add_generation_prompt)
        try:
            return apply(messages)
        except TemplateError:
            return apply([m for m in messages if m["role"] != "system"])

    return render


def end_of_answer_id(lm: LoadedModel, chat: bool) -> int | None:
    """The token a tuning target ends with: the chat template's end-of-turn token when the chat
    template is on (the token the template writes after an answer), else the tokenizer's EOS; the
    smallest of the model's EOS ids only when the tokenizer names none."""
    if chat:
        end = end_of_turn_id(lm.tokenizer)
        if end is not None:
            return end
    eos = getattr(lm.tokenizer, "eos_token_id", None)
    if eos is not None:
        return int(eos)
    return lm.eos_ids[0] if lm.eos_ids else None


def _move_spaces(context: str, continuation: str) -> tuple[str, str]:
    """Trailing spaces of the context moved to the front of the continuation. Only spaces: a newline
    ending a chat template's generation prompt belongs to the prompt the model generates from."""
    spaces = len(context) - len(context.rstrip(" "))
    return (context[:-spaces], context[-spaces:] + continuation) if spaces else (context, continuation)


def encode_pair(tokenizer, context: str, continuation: str, special: bool = True) -> tuple[list[int], list[int]]:
    """Context and continuation ids, the continuation cut from the joint encoding at the context's
    length (lm-eval's ``_encode_pair``): trailing spaces of the context move to the continuation,
    so ``"Answer: "`` + ``"B"`` is read as ``"Answer:"`` + ``" B"``. The one rule for tuning
    targets, option scores and cloze scores.

    The context's ids are always those of the context alone (``special``: with BOS etc.), the ids
    the model is given; where the joint encoding does not start with them (a token merged across
    the seam that moving spaces does not undo, e.g. ``"\n"`` + ``"\n"``), the continuation is
    encoded on its own."""
    context, continuation = _move_spaces(context, continuation)
    ctx = list(tokenizer(context, add_special_tokens=special).input_ids)
    whole = list(tokenizer(context + continuation, add_special_tokens=special).input_ids)
    if whole[:len(ctx)] == ctx:
        return ctx, whole[len(ctx):]
    return ctx, list(tokenizer(continuation, add_special_tokens=False).input_ids)
