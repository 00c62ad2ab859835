"""The model layer: loading a causal LM (models: presets, hub ids, local folders, GGUF), the soft prompt
(softprompt: its placement before the prompt's tokens and its PEFT file format) and what runs the
frozen model: generation, log-likelihoods (loglik), the tuning loss (tuning_loss), on forward passes
with shared KV caches (kv_cache), batches (batching) and memory sizing (memory). Knows tokens and
tensors, never a task's format. Imports only the leaf modules."""
