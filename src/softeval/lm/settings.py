"""The lm layer's option values that the option table reads (run/config.py): kept apart from the modules that
use them, which import torch, so that the table, and with it the command line, starts without torch."""

from __future__ import annotations

# --method lora's default targets: the attention projections of Llama, Gemma, Qwen, Mistral and most decoders.
# PEFT's own default for those is q_proj and v_proj alone; train-before-test (lm-harmony) kept that default.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
ALL_LINEAR = "all-linear"  # PEFT's name for every linear layer but the output head

TUNE_DTYPES = ("auto", "float32", "bfloat16")  # --tune-dtype's choices (lm/precision.py: tuning_dtype)
