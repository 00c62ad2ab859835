"""Prompts (softeval.run.prompting): few-shot cloze prompts put solved cloze shots first without the
letter instruction, and an option is encoded jointly with its context, the context's trailing space
moved to the option."""

from __future__ import annotations

import pytest
from tiny import tiny_lm

from softeval.errors import UserError
from softeval.run.config import SWEEP_FILE
from softeval.run.prompting import Prompter, encode_pair, use_chat_template


def test_cloze_few_shot_puts_solved_cloze_shots_first_without_the_letter_instruction(tmp_path, toymc):
    lm = tiny_lm()
    splits = toymc.load()
    prompter = Prompter(lm, toymc, chat=False, shots=splits.tune[:2])
    text = prompter.cloze_text(splits.eval[0], "few-shot")
    first = splits.tune[0]
    assert text.startswith(f"Question: {first.fields['question']}\nAnswer: {first.fields['answer']}\n\n")
    assert text.endswith(toymc.cloze(splits.eval[0])) and "letter" not in text
    assert prompter.cloze_text(splits.eval[0], "soft-prompt") == toymc.cloze(splits.eval[0])


def test_options_are_encoded_jointly_with_the_context():
    class Merging:  # reads " B" as one token, as BPE tokenizers do
        def __call__(self, text, add_special_tokens=True):
            ids, i = [], 0
            while i < len(text):
                if text.startswith(" B", i):
                    ids.append(1000)
                    i += 2
                else:
                    ids.append(ord(text[i]))
                    i += 1
            return type("Enc", (), {"input_ids": ids})()

    # The context's trailing space moves to the continuation: " B" is one token, not " " then "B".
    ctx, cont = encode_pair(Merging(), "Answer: ", "B")
    assert ctx == [ord(c) for c in "Answer:"] and cont == [1000]
    ctx, cont = encode_pair(Merging(), "x", " yB")
    assert ctx == [ord("x")] and cont == [ord(" "), ord("y"), ord("B")]


def test_chat_template_on_without_a_template_names_the_option_as_the_user_wrote_it():
    lm = tiny_lm()
    assert not lm.has_chat_template
    with pytest.raises(UserError, match=r"^--chat-template on, but the tokenizer of .* has no chat template$"):
        use_chat_template(lm, "on")
    with pytest.raises(UserError, match=r"^chat_template: on, but the tokenizer of .* has no chat template$"):
        use_chat_template(lm, "on", SWEEP_FILE)
    assert use_chat_template(lm, "auto") is False and use_chat_template(lm, "off") is False
