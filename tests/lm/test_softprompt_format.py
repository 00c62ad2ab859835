"""A saved soft prompt's format version (softeval.json's format_version): recorded by ``SoftPrompt.save``; a
folder softeval saved in another version, or in none, is refused in one line naming both versions by
every reader of it (``--soft-prompt``, ``--init from:`` and their checks before the model loads)."""

from __future__ import annotations

import json

import pytest
import torch

from softeval.constants import SOFT_PROMPT_FORMAT_VERSION
from softeval.errors import UserError
from softeval.lm.softprompt import SOFTEVAL_META, SoftPrompt, adapter_shape


def test_a_saved_soft_prompt_records_its_format_version_first(lm, tmp_path):
    saved = SoftPrompt.initialise(lm, 4, "text:abc", seed=0)
    saved.save(tmp_path, lm, {"task": "t", "seed": 0})
    meta = json.loads((tmp_path / SOFTEVAL_META).read_text())
    assert list(meta) == ["format_version", "placement", "init", "model", "task", "seed"]
    assert meta["format_version"] == SOFT_PROMPT_FORMAT_VERSION == 1
    loaded = SoftPrompt.load(tmp_path, lm)
    torch.testing.assert_close(loaded.weight, saved.weight, rtol=0, atol=0)
    assert loaded.init == "text:abc" and adapter_shape(tmp_path) == (4, saved.weight.shape[1])


@pytest.mark.parametrize("found, said", [
    (2, "format_version 2"), (0, "format_version 0"), ("1", "format_version '1'"),
    (KeyError, "no format_version, so was saved before softeval recorded one"),
])
def test_a_soft_prompt_of_another_format_version_is_refused_naming_both(lm, tmp_path, found, said):
    SoftPrompt.initialise(lm, 4, "vocab", seed=0).save(tmp_path, lm)
    meta = json.loads((tmp_path / SOFTEVAL_META).read_text())
    if found is KeyError:
        del meta["format_version"]
    else:
        meta["format_version"] = found
    (tmp_path / SOFTEVAL_META).write_text(json.dumps(meta))
    line = (f"the soft prompt {tmp_path} has {said} (in its softeval.json); this softeval reads "
            "format_version 1: tune it again with this softeval (rerun the run that saved it with --force), "
            "or use the softeval that saved it")
    readers = {"--soft-prompt": lambda: SoftPrompt.load(tmp_path, lm),
               "the check before the model loads": lambda: adapter_shape(tmp_path),
               "--init from:": lambda: SoftPrompt.initialise(lm, 4, f"from:{tmp_path}")}
    for name, read in readers.items():
        with pytest.raises(UserError) as refused:
            read()
        assert str(refused.value) == line, name


def test_an_adapter_without_softeval_notes_is_read_as_peft_saved_it(lm, tmp_path):
    saved = SoftPrompt.initialise(lm, 4, "vocab", seed=0)
    saved.save(tmp_path, lm)
    (tmp_path / SOFTEVAL_META).unlink()  # a prompt-tuning adapter that PEFT itself saved has none
    loaded = SoftPrompt.load(tmp_path, lm)
    torch.testing.assert_close(loaded.weight, saved.weight, rtol=0, atol=0)
    assert loaded.init == "vocab" and adapter_shape(tmp_path) == tuple(saved.weight.shape)
