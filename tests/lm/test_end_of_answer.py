"""The end-of-answer token: tuning targets end with the chat template's
end-of-turn token when the chat template is on, else with the tokenizer's EOS (not the smallest of
the model's EOS ids); an end-of-turn marker left in a generation never fails the strict format."""

from __future__ import annotations

import types

import torch
from tiny import tiny_model, tiny_tokenizer

from softeval.lm import generation
from softeval.lm.models import POST_TRAINED, LoadedModel, load_model
from softeval.run.prompting import Prompter
from softeval.run.scoring import score_output
from softeval.tasks import get_task
from softeval.tasks.base import Example

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
ITEM = Example(id="t/0", fields={"question": "Which is a colour?", "subject": "art"}, gold="B",
               options=("dog", "red", "cat", "sun"))


def chat_tokenizer():
    """Two EOS-like tokens, the smaller id not the one the chat template ends turns with
    (as Qwen2.5-Instruct: <|endoftext|> 151643, <|im_end|> 151645)."""
    tok = tiny_tokenizer()
    tok.add_tokens(["<|endoftext|>", "<|im_end|>", "<|im_start|>"], special_tokens=True)
    tok.eos_token = "<|endoftext|>"
    tok.chat_template = CHATML
    return tok


def test_end_of_answer_token_is_the_chat_templates_end_of_turn(tmp_path):
    tok = chat_tokenizer()
    end_of_text, im_end = tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    model = tiny_model(len(tok))
    model.generation_config.eos_token_id = [end_of_text, im_end]
    folder = tmp_path / "tiny-chat-instruct"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    lm = load_model(str(folder), device="cpu", dtype="float32")
    assert lm.kind == POST_TRAINED and {end_of_text, im_end} <= set(lm.eos_ids)
    mmlu = get_task("mmlu")
    assert Prompter(lm, mmlu, chat=True, shots=[]).target_ids(ITEM)[-1] == im_end
    assert Prompter(lm, mmlu, chat=False, shots=[]).target_ids(ITEM)[-1] == end_of_text


class Scripted(torch.nn.Module):
    """A stand-in causal LM that writes a fixed token sequence, whatever it is given."""

    def __init__(self, script: list[int], vocab: int):
        super().__init__()
        self.script, self.vocab, self.step = script, vocab, 0
        self.embed = torch.nn.Embedding(vocab, 8)
        self.config = types.SimpleNamespace()

    def get_input_embeddings(self):
        return self.embed

    def forward(self, inputs_embeds=None, input_ids=None, attention_mask=None, position_ids=None,
                past_key_values=None, use_cache=False, logits_to_keep=0):
        rows = (inputs_embeds if inputs_embeds is not None else input_ids).shape[0]
        logits = torch.zeros(rows, 1, self.vocab)
        logits[:, -1, self.script[min(self.step, len(self.script) - 1)]] = 1.0
        self.step += 1
        return types.SimpleNamespace(logits=logits, past_key_values=None)


def test_end_of_turn_marker_left_in_the_text_does_not_fail_the_strict_format():
    tok = chat_tokenizer()
    end_of_text, im_end = tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    mmlu = get_task("mmlu")
    spelled = tok("B<|im_end", add_special_tokens=False).input_ids[:1] + [
        tok.convert_tokens_to_ids(c) for c in "<|im_end|>"]  # the marker written out in plain characters
    for script in ([tok.convert_tokens_to_ids("B"), im_end, tok.convert_tokens_to_ids("x")],  # the special token
                   spelled + [tok.convert_tokens_to_ids("x")]):
        lm = LoadedModel(Scripted(script, len(tok)), tok, "scripted", POST_TRAINED, "test", pad_id=0,
                         eos_ids=(end_of_text,))  # a generation config that does not list <|im_end|>
        out = generation.generate(lm, [tok("Q").input_ids], max_new_tokens=len(script), stop=mmlu.stop,
                                  batch_size=1, prefix_cache=False).texts[0]
        assert out == "B"
        assert score_output(mmlu, ITEM, out)["format_ok"]
