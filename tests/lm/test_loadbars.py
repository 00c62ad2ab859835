"""transformers' progress bars while a model loads (softeval.lm.loadbars): off where stderr is no terminal
(the GGUF conversion's tqdm bar was a log file's carriage-return lines), as they were on one."""

from __future__ import annotations

import io

from transformers import modeling_gguf_pytorch_utils as gguf
from transformers.utils import logging as hf_logging

from softeval.lm.loadbars import bars_only_on_a_terminal


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_gguf_conversion_bar_is_off_in_a_log_and_put_back_after(capfd):
    before = gguf.tqdm
    with bars_only_on_a_terminal(io.StringIO()):
        assert list(gguf.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors...")) == [0, 1, 2]
        assert not hf_logging.is_progress_bar_enabled()
    assert "Converting" not in capfd.readouterr().err
    assert gguf.tqdm is before and hf_logging.is_progress_bar_enabled()
    with bars_only_on_a_terminal(Terminal()):
        assert gguf.tqdm is before
        list(gguf.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."))
    assert "Converting" in capfd.readouterr().err  # a terminal keeps its bar
