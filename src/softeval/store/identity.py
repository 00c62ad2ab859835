"""A run's identity: which of its options (results.json ``config``) define it, and how two records differ
(docs/reference/run-format.md, "Run identity"). ``store.runs`` refuses a finished run of other settings by it; the
analysis asks it whether two runs of different methods share everything but their method."""

from __future__ import annotations

from softeval.methods import ANSWER_LINE, SOFT_PROMPT_OPTIONS, TUNE_DTYPE_RESOLVED, TUNING_OPTIONS, known, spec_of

# The run's identity is every option it was run with (results.json "config") except these, which
# provably cannot change a number in its files; anything else, including options added later, is
# part of it. Kept in: device and dtype (kernels and precision differ), eval_batch_size (batch
# composition changes padding and matmul shapes, which can flip a greedy near-tie), curve_every and
# curve_items (the curve, the tuning pool and the shots), kind (the chat template).
NOT_IDENTITY = (
    "out",    # where the folders go; moving a runs folder keeps its runs
    "force",  # whether to replace a finished run: decides what happens, not what is computed
    "wait",   # whether to wait for another process writing the run
    "series",  # a label: the checkpoint (its fingerprint, or its path: FINGERPRINT) is what is scored
    "step",    # the checkpoint's training step: a label of the model, like the series
    "include_path",  # where lm-eval YAMLs lie; what the task's says is its config digest (config.LM_EVAL)
)
# Options only some methods read are not part of another method's identity (new tuning settings leave a finished
# zero-shot run finished): each method's spec says which it reads (softeval.methods: METHOD_OPTIONS, MethodSpec.reads).
# TUNE_DTYPE_RESOLVED: --tune-dtype as the machine running the run resolves it (a run recorded before it:
# tuning.tune_dtype_ran); a check away from that machine (a remote sweep's driver) leaves it out, and the worker
# compares it.
MACHINE_RESOLVED = (TUNE_DTYPE_RESOLVED,)
# ANSWER_LINE: what the answer line that --answer-share weighs holds (lm.tuning_loss.ANSWER_LINE_REVISION), recorded
# beside the share from 2 on: a weighted run recorded without it weighed answer line 1.
NOT_RECORDED = "not recorded"


# A checkpoint of a series also records this: lm.fingerprint.checkpoint_fingerprint of its folder, what it holds
# rather than where it lies. Two records that both carry it are the same checkpoint exactly when it is
# equal, wherever the folder was (`model`, its path, is then left out of the identity: a moved or renamed
# series folder keeps its runs); when either lacks it (a run recorded before it existed), the path is
# compared as it was. The one place of that rule: identity_of and identity_diff.
FINGERPRINT = "model_fingerprint"


# A built-in task's definition (tasks.base.Task.revision), recorded from 2 on: a run written before ran 1.
TASK_REVISION = "task_revision"


# The prompt-variant grammar's revision (tasks/variants.py GRAMMAR_REVISION), recorded by a run of a variant N > 0:
# what format N is.
PROMPT_GRAMMAR = "prompt_grammar"


# What a changed number of a definition means, said where a run of another one is refused.
WHY_CHANGED = {TASK_REVISION: "the task's definition changed (docs/reference/tasks.md)",
               PROMPT_GRAMMAR: "the prompt-variant grammar changed (docs/guide/prompt-variants.md)",
               ANSWER_LINE: "what --answer-share weighs as the answer line changed (docs/reference/protocol.md)"}


def fingerprinted(options: dict) -> bool:
    """Whether ``options`` identify the model by its fingerprint (a checkpoint of a series)."""
    return isinstance(options.get(FINGERPRINT), str)


def identity_of(options: dict, by_fingerprint: bool | None = None) -> dict:
    """The part of a run's options that defines it: all but NOT_IDENTITY and the options its method
    does not read (its spec's ``reads``: softeval.methods; a record without a method, or of a method not registered
    here, keeps them all; a saved soft prompt scored again reads no tuning option: what it scores is its digest).
    The model is its fingerprint (FINGERPRINT) and not its path when ``by_fingerprint`` (default: when ``options``
    carry one), else its path; identity_diff decides it for two records."""
    if by_fingerprint is None:
        by_fingerprint = fingerprinted(options)
    method = options.get("method")
    left_out = {"model" if by_fingerprint else FINGERPRINT, *NOT_IDENTITY}
    if options.get("soft_prompt"):  # it scores a saved soft prompt (`softeval eval`): it tunes nothing
        left_out.update(TUNING_OPTIONS, SOFT_PROMPT_OPTIONS)
    return {k: v for k, v in options.items() if k not in left_out and (method is None or reads(method, k))}


def reads(method: str, option: str) -> bool:
    """Whether a run of ``method`` reads ``option`` (its spec's ``reads``): a zero-shot run reads no seed. A method not
    registered here reads every option (nothing of its identity is dropped)."""
    return not known(method) or spec_of(method).reads_option(option)


def identity_diff(old: dict, new: dict) -> list[str]:
    """'key: old -> new' for each identity option that differs; an option a run did not record (it
    was written before the option existed) counts as different, its effect then being unknown. A checkpoint is
    compared by its fingerprint when both records carry one, else by its path (FINGERPRINT). An option that is a
    mapping in both (an lm-eval task's ``lm_eval``) is said part by part: ``lm_eval.config_sha256: ...``."""
    by_fingerprint = fingerprinted(old) and fingerprinted(new)
    paths = old.get("model"), new.get("model")
    old = identity_of(old, by_fingerprint)
    new = identity_of(new, by_fingerprint)
    old = {k: v for k, v in old.items() if k in new or k not in MACHINE_RESOLVED}  # not resolved here: not compared

    def show(options: dict, key: str) -> str:
        return repr(options[key]) if key in options else NOT_RECORDED

    def line(key: str) -> str:
        if key == FINGERPRINT and key in old and key in new:
            was = "what they were when the run scored it" if paths[0] == paths[1] \
                else f"those of {paths[0]}, which the run scored"
            return (f"{key}: the contents of checkpoint {paths[1]} differ from {was} "
                    f"({old[key][:12]}… -> {new[key][:12]}…)")
        if key in WHY_CHANGED:
            return f"{key}: {show(old, key)} -> {show(new, key)}, {WHY_CHANGED[key]}"
        if key.endswith("_sha256") and isinstance(old.get(key), str) and isinstance(new.get(key), str):
            return f"{key}: the contents differ ({old[key][:12]}… -> {new[key][:12]}…)"
        return f"{key}: {show(old, key)} -> {show(new, key)}"

    def lines(key: str) -> list[str]:
        """A mapping both records hold (an lm-eval task's ``lm_eval``): each of its parts that differs, by name."""
        if isinstance(old.get(key), dict) and isinstance(new.get(key), dict):
            return identity_diff({f"{key}.{k}": v for k, v in old[key].items()},
                                 {f"{key}.{k}": v for k, v in new[key].items()}) or [line(key)]
        return [line(key)]

    keys = list(new) + [k for k in old if k not in new]
    return [said for k in keys if k not in old or k not in new or old[k] != new[k] for said in lines(k)]

# Options two runs may differ in and still be compared item by item: which items they scored (a paired test takes
# those both scored), orderings scored beside them, and the batch size of scoring (two methods' prompts differ, so
# their batches differ whatever it is).
PAIRING_NEUTRAL = ("limit", "skip_bad_rows", "permutations", "eval_batch_size")


def setting_diff(a: dict, b: dict) -> list[str]:
    """identity_diff of two runs of (usually) different methods over the options both their methods read, but
    PAIRING_NEUTRAL: what besides the method sets them apart, so that a comparison of the two measures more than
    the method ([] when nothing does). An option one of them did not record counts as different, as in
    identity_diff."""
    methods = a.get("method"), b.get("method")

    def shared(options: dict) -> dict:
        return {k: v for k, v in options.items() if k != "method" and k not in PAIRING_NEUTRAL
                and all(m is None or reads(m, k) for m in methods)}

    return identity_diff(shared(a), shared(b))
