"""Placement of the soft prompt, the loss, and the PEFT adapter round trip."""

import json

import pytest
import torch

from softeval.errors import UserError
from softeval.lm import generation, tuning_loss
from softeval.lm.softprompt import SoftPrompt, layout_inputs


def _ids(lm, text):
    return lm.tokenizer(text).input_ids


def test_layout_is_pads_then_soft_prompt_then_bos(lm):
    soft = SoftPrompt.initialise(lm, 3, "vocab", seed=0).weight
    short, long = _ids(lm, "ab"), _ids(lm, "abcdef")
    inputs = layout_inputs(lm, [short, long], soft)
    pads = len(long) - len(short)
    assert inputs["attention_mask"][0].tolist() == [0] * pads + [1] * (3 + len(short))
    assert inputs["position_ids"][0, pads:].tolist() == list(range(3 + len(short)))
    torch.testing.assert_close(inputs["inputs_embeds"][0, pads:pads + 3], soft)
    bos = lm.model.get_input_embeddings()(torch.tensor([1]))[0]
    torch.testing.assert_close(inputs["inputs_embeds"][0, pads + 3], bos)


@pytest.mark.parametrize("with_soft", [True, False])
def test_padded_item_gives_same_logits_as_alone(lm, with_soft):
    soft = SoftPrompt.initialise(lm, 4, "vocab", seed=1).weight if with_soft else None
    short, long = _ids(lm, "Question: 1+1?\nAnswer:"), _ids(lm, "Question: what is two plus three?\nAnswer:")
    with torch.no_grad():
        batch = lm.model(**layout_inputs(lm, [short, long], soft)).logits
        alone = lm.model(**layout_inputs(lm, [short], soft)).logits
    n = alone.shape[1]
    torch.testing.assert_close(batch[0, -n:], alone[0], atol=1e-5, rtol=1e-5)


def test_padded_generation_matches_alone(lm):
    soft = SoftPrompt.initialise(lm, 4, "vocab", seed=2).weight
    short, long = _ids(lm, "x=1"), _ids(lm, "a much longer prompt here")
    together = generation.generate(lm, [short, long], soft=soft, max_new_tokens=6, batch_size=2).texts
    alone = [generation.generate(lm, [s], soft=soft, max_new_tokens=6).texts[0] for s in (short, long)]
    assert together == alone


def test_loss_counts_target_tokens_only(lm):
    soft = SoftPrompt.initialise(lm, 3, "vocab", seed=0).weight
    prompts = [_ids(lm, "Q: abc\nA:"), _ids(lm, "Q: a\nA:")]
    targets = [lm.tokenizer(" x", add_special_tokens=False).input_ids + [2],
               lm.tokenizer(" yz", add_special_tokens=False).input_ids + [2]]
    loss = tuning_loss.target_loss(lm, prompts, targets, soft)
    # Reference: full logits of each item alone, cross-entropy with prompt positions masked out.
    total, count = 0.0, 0
    for p, t in zip(prompts, targets):
        inputs = layout_inputs(lm, [p + t], soft)
        logits = lm.model(**inputs).logits[0]
        labels = torch.full((logits.shape[0],), -100)
        labels[-len(t):] = torch.tensor(t)
        total += torch.nn.functional.cross_entropy(logits[:-1], labels[1:], reduction="sum", ignore_index=-100)
        count += len(t)
    torch.testing.assert_close(loss, total / count, atol=1e-5, rtol=1e-5)


def test_peft_loads_adapter_and_gives_same_logits(lm, tmp_path):
    peft = pytest.importorskip("peft")
    soft = SoftPrompt.initialise(lm, 5, "vocab", seed=3)
    soft.save(tmp_path / "sp", lm)
    config = json.loads((tmp_path / "sp" / "adapter_config.json").read_text())
    assert config["peft_type"] == "PROMPT_TUNING" and config["num_virtual_tokens"] == 5
    ids = _ids(lm, "Question: 2+2?\nAnswer:")
    with torch.no_grad():
        ours = lm.model(**layout_inputs(lm, [ids], soft.weight)).logits
        wrapped = peft.PeftModel.from_pretrained(lm.model, str(tmp_path / "sp"))
        theirs = wrapped(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long)).logits
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)


def test_load_rejects_wrong_shape_and_missing(lm, tmp_path):
    with pytest.raises(UserError, match="no soft prompt"):
        SoftPrompt.load(tmp_path / "nothing", lm)
    other = SoftPrompt(torch.randn(4, 7))
    other.save(tmp_path / "bad", lm)
    with pytest.raises(UserError, match="tuned for another model"):
        SoftPrompt.load(tmp_path / "bad", lm)
    good = SoftPrompt.initialise(lm, 4, "text:answer", seed=0)
    good.save(tmp_path / "good", lm)
    loaded = SoftPrompt.load(tmp_path / "good", lm)
    torch.testing.assert_close(loaded.weight, good.weight)
    assert loaded.init == "text:answer"


def test_init_options(lm):
    assert SoftPrompt.initialise(lm, 6, "random", seed=0).weight.shape == (6, 32)
    a = SoftPrompt.initialise(lm, 6, "vocab", seed=0).weight
    b = SoftPrompt.initialise(lm, 6, "vocab", seed=0).weight
    torch.testing.assert_close(a, b)
    with pytest.raises(UserError, match="unknown soft-prompt init"):
        SoftPrompt.initialise(lm, 6, "zeros")


def test_ranked_unigram_vocabulary_is_rebuilt_as_bpe():
    """A SentencePiece-BPE vocabulary loaded as Unigram splits words; the rebuilt BPE keeps them whole."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    from softeval.lm.presets import bpe_from_ranked_unigram

    pieces = ["<unk>", "▁", "c", "a", "p", "i", "t", "l", "ca", "ap", "it", "al", "cap", "ital", "capital", "▁capital"]
    # Scores are merge ranks: lower ids merge first, as in a GGUF converted from SentencePiece BPE.
    vocab = [(p, 0.0 if len(p) == 1 or p.startswith("<") else -float(i)) for i, p in enumerate(pieces)]
    core = Tokenizer(models.Unigram(vocab, unk_id=0))
    core.normalizer = normalizers.Replace(" ", "▁")
    core.decoder = decoders.Replace("▁", " ")
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>")
    split = tok(" capital", add_special_tokens=False).input_ids
    assert len(split) > 1  # the Unigram reading prefers short pieces with higher scores
    bpe_from_ranked_unigram(tok)
    assert tok.convert_ids_to_tokens(tok(" capital", add_special_tokens=False).input_ids) == ["▁capital"]


def test_one_input_layout_for_plain_and_cached_prefix_inputs(lm):
    """``layout_inputs`` is the layout of plain inputs and of the shared-prefix path (``kv_cache``): a
    suffix after a cached prefix gets the positions it has in the plain ``[pads][soft][prefix][suffix]``."""
    soft = torch.randn(3, lm.model.get_input_embeddings().embedding_dim)
    prefix, suffixes = [5, 6, 7, 8], [[9, 10, 11], [12]]
    plain = layout_inputs(lm, [prefix + s for s in suffixes], soft)
    after = layout_inputs(lm, suffixes, past_mask=torch.ones((2, 3 + len(prefix)), dtype=torch.long))
    for row, s in enumerate(suffixes):
        assert plain["position_ids"][row, -len(s):].tolist() == after["position_ids"][row, -len(s):].tolist()
        assert after["attention_mask"][row].sum() == plain["attention_mask"][row].sum()
    assert after["inputs_embeds"].shape[1] == 3 and after["attention_mask"].shape[1] == 3 + 4 + 3
