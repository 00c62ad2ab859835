"""Loading a model from a local folder."""

from __future__ import annotations

import json
import logging

from tiny import tiny_model, tiny_tokenizer
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from softeval.lm.models import _not_mistral_kwargs, load_model


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def big_vocab_tokenizer():
    """A character tokenizer with a vocabulary past 100k: transformers only checks such vocabularies."""
    small = tiny_tokenizer()
    spec = json.loads(small.backend_tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    vocab.update({f"<unused{i}>": len(vocab) + i for i in range(100_001)})
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), bos_token="<bos>",
                                   eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")


def test_local_folder_loads_frozen_without_false_tokenizer_alarm(tmp_path):
    tok = big_vocab_tokenizer()
    tiny_model(len(tok)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    handler = Collect()
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        lm = load_model(str(tmp_path), device="cpu", kind="base")
    finally:
        logger.removeHandler(handler)
    assert not [m for m in handler.messages if "regex" in m], handler.messages
    assert lm.tokenizer("ab").input_ids == tok("ab").input_ids
    assert not any(p.requires_grad for p in lm.model.parameters())


def test_mistral_checkpoints_keep_the_regex_check(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mistral"}))
    assert _not_mistral_kwargs(str(tmp_path)) == {}
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    has_flag = hasattr(PreTrainedTokenizerBase, "_patch_mistral_regex")
    assert _not_mistral_kwargs(str(tmp_path)) == ({"fix_mistral_regex": False} if has_flag else {})
    assert _not_mistral_kwargs(str(tmp_path / "missing")) == {}


def test_a_preset_conversion_is_kept_per_transformers_major(tmp_path, monkeypatch):
    """A copy dequantised by transformers 4 is not reused under 5 (their GGUF tokenizers differ)."""
    import transformers

    from softeval.lm.models import PRESETS, converted_path

    monkeypatch.setenv("SOFTEVAL_CACHE", str(tmp_path))
    preset = PRESETS["gemma-3-270m"]
    monkeypatch.setattr(transformers, "__version__", "4.57.6")
    four = converted_path(preset)
    monkeypatch.setattr(transformers, "__version__", "5.24.0")
    five = converted_path(preset)
    assert four != five and four.parent == five.parent == tmp_path / "models"
    assert five.name.endswith("-tf5") and four.name.endswith("-tf4")


def test_transformers_4_is_told_that_the_gemma_tokenizer_differs(tmp_path, monkeypatch, capsys):
    import transformers

    from softeval.lm import models

    monkeypatch.setenv("SOFTEVAL_CACHE", str(tmp_path))
    monkeypatch.setattr(transformers, "__version__", "4.57.6")
    monkeypatch.setattr(models, "_from_pretrained", lambda *a, **k: ("model", "tokenizer"))
    for name in ("gemma-3-270m", "smollm2-135m-instruct"):
        saved = models.converted_path(models.PRESETS[name])
        saved.mkdir(parents=True)
        (saved / "config.json").write_text("{}")
        assert models._load_preset(models.PRESETS[name], None, None) == ("model", "tokenizer")
    err = capsys.readouterr().err
    assert err.count("transformers 4 rebuilds") == 1 and "gemma-3-270m" in err


def test_cuda_runs_leave_cudnn_out_of_attention_and_cpu_runs_change_nothing():
    import torch

    from softeval.lm.models import steady_attention_kernels

    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        steady_attention_kernels("cpu")
        assert torch.backends.cuda.cudnn_sdp_enabled()
        steady_attention_kernels("cuda:1")
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)
