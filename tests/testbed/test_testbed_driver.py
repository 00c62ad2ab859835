"""The testbed's process-wide switches (transformers' bars, torch's threads) are put back as they were, also
when it fails: a testbed run in a process that goes on (a test session, a notebook) leaves it as it found it."""

from __future__ import annotations

import io

import pytest
import torch
from rich.console import Console
from transformers.utils import logging as hf_logging

from softeval.testbed import driver


def test_bars_and_threads_are_put_back_after_a_testbed_that_failed(monkeypatch, tmp_path):
    seen = {}

    def failing(out, settings, console, max_parallel):
        seen.update(bars=hf_logging.is_progress_bar_enabled(), threads=torch.get_num_threads())
        raise RuntimeError("stopped")

    monkeypatch.setattr(driver, "_run_testbed", failing)
    hf_logging.enable_progress_bar()
    threads = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="stopped"):
        settings = driver.Settings(quick=True, world_seeds=(0,), people=40, steps=2)
        driver.run_testbed(tmp_path, settings, Console(file=io.StringIO()))
    assert seen == {"bars": False, "threads": 1}
    assert hf_logging.is_progress_bar_enabled() and torch.get_num_threads() == threads
