"""The names of the protocol (docs/reference/protocol.md), one list each, used by the CLI, the runs index, compare and
the report: the kinds of model and target, the files of a trained part. The methods are the registry's
(softeval.methods), the metrics softeval.metrics' table (METRIC_TABLE)."""

# A saved soft prompt: a PEFT prompt-tuning adapter folder (lm.softprompt writes and reads it; a finished
# soft-prompt run holds one, which store.format checks).
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
# The folder of a finished run that holds what its method trained (methods.MethodSpec.folder): a soft prompt, a
# LoRA adapter (PEFT's LoRA format: lm.lora).
SOFT_PROMPT_FOLDER = "soft_prompt"
LORA_FOLDER = "lora_adapter"
# The format of such a folder as softeval saves it (PEFT's files and softeval's notes beside them, which
# record it): a change of either, the placement of the vectors among them, is a new version, never read
# as this one.
SOFT_PROMPT_FORMAT_VERSION = 1
# A lora run's adapter: PEFT's LoRA folder (the same two file names) with softeval's notes beside it
# (lm.lora writes it); its format version, like the soft prompt's.
LORA_FORMAT_VERSION = 1

# What a model is: pre-trained only, or post-trained (instruction-tuned, chat); `--kind`, a sweep file's `kind`.
BASE, POST_TRAINED = "base", "post-trained"
KINDS = (BASE, POST_TRAINED)

# What a task's targets are (``Task.target_kind``): a letter, a word or a short answer on one line, or a worked
# solution whose last line is the answer ("#### 42"); the tuning defaults of the second (run/config.py).
ONE_LINE, WORKED_SOLUTION = "one-line", "worked-solution"
TARGET_KINDS = (ONE_LINE, WORKED_SOLUTION)

# `--chat-template`: auto (on for a post-trained model whose tokenizer has a template), on, off.
CHAT_TEMPLATES = ("auto", "on", "off")

# results.json -> metrics[SOURCE_METRICS]: the scores a task's own source computes with its own aggregation
# functions (an lm-eval task: lm-eval's per-task metrics, ``"metric,filter"`` keyed, which lm-eval's group
# aggregation reads), beside softeval's metrics (softeval.metrics); absent for softeval's own tasks.
SOURCE_METRICS = "lm_eval"
