"""The names of the protocol (docs/design.md), one list each, used by the CLI, the runs index, compare and
the report: the methods every task is scored with, and the metrics a run reports."""

METHODS = ("zero-shot", "few-shot", "soft-prompt")

# A saved soft prompt: a PEFT prompt-tuning adapter folder (lm.softprompt writes and reads it; a finished
# soft-prompt run holds one, which store.format checks).
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"

# What a model is: pre-trained only, or post-trained (instruction-tuned, chat); `--kind`, a sweep file's `kind`.
BASE, POST_TRAINED = "base", "post-trained"
KINDS = (BASE, POST_TRAINED)

# `--chat-template`: auto (on for a post-trained model whose tokenizer has a template), on, off.
CHAT_TEMPLATES = ("auto", "on", "off")

# `--backend`: which engine generates the outputs (hf: softeval's own loop on the transformers model; vllm:
# vLLM, docs/backends.md). Log-likelihoods and tuning are always the transformers model's.
BACKENDS = ("hf", "vllm")

# Metrics every run can have, in the order tables show them (f1: SQuAD and TriviaQA only; the
# letter and cloze log-likelihoods: multiple choice; the last two: with --permutations).
METRICS = ("accuracy", "format_rate", "knowledge_accuracy", "lenient_accuracy", "letter_loglik_accuracy",
           "cloze_accuracy", "cloze_accuracy_norm", "permutation_consistency", "circular_accuracy")
