"""transformers' own progress bars while a model loads (the GGUF conversion's "Converting and de-quantizing
GGUF tensors...", a sharded checkpoint's "Loading checkpoint shards"): tqdm bars, which in a log file or a
pipe are hundreds of carriage-return updates on one line. Off where stderr is no terminal; the run then says
the load in one line of its own ("loaded ... in 18.0s")."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from functools import partial


@contextmanager
def bars_only_on_a_terminal(stream=None):
    """While loading: transformers' tqdm bars as they are on a terminal, off elsewhere (put back after)."""
    stream = stream or sys.stderr
    if getattr(stream, "isatty", lambda: False)():
        yield
        return
    from transformers import modeling_gguf_pytorch_utils as gguf  # lazy: slow to import; only a load needs it
    from transformers.utils import logging as hf_logging

    was_on, bar = hf_logging.is_progress_bar_enabled(), getattr(gguf, "tqdm", None)
    hf_logging.disable_progress_bar()
    if bar is not None:  # the GGUF conversion calls tqdm itself, not transformers' switchable one
        gguf.tqdm = partial(bar, disable=True)
    try:
        yield
    finally:
        if bar is not None:
            gguf.tqdm = bar
        if was_on:
            hf_logging.enable_progress_bar()
