"""The model layer: loading a causal LM (presets, hub ids, local folders, GGUF), the soft prompt (its
placement before the prompt's tokens and its PEFT file format) and the engine that runs the frozen
model (generation, option log-likelihoods, the tuning loss, batching and memory). Knows tokens and
tensors, never a task's format. Imports only the leaf modules."""
