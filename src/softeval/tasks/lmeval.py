"""``lm-eval:NAME``: an lm-evaluation-harness task run by softeval with lm-eval's own prompts, shots, stops,
filters and metrics (docs/reference/tasks.md, "lm-eval tasks").

- Prompts: lm-eval's ``fewshot_context`` (description, delimiters, few-shot split, sampler, seed 1234,
  ``gen_prefix``; under a chat template lm-eval's own messages, few-shot as multi-turn), each scored item's
  shots drawn in lm-eval's document order, so a run's prompts are those of ``simple_evaluate`` on the same
  documents. softeval never re-renders them.
- Tuning: the task's training split, else its validation split, else a seeded held-out part of the scored
  split; target = ``target_delimiter`` + ``doc_to_target`` (for multiple choice: the gold choice's text).
- Generative scoring: strict = the filter pipeline named strict (else the first), its regex fallback read
  as "format not followed"; lenient = the other pipeline (else the same); correct = the task's first metric
  (``process_results``) on the strict answer, so accuracy is lm-eval's number. Every pipeline's answer and
  metrics are kept per item (``lm_eval`` in samples.jsonl). A task without a regex filter: format "n/a".
- Multiple choice: lm-eval's ``acc``/``acc_norm`` are the cloze scores (cloze_accuracy, cloze_accuracy_norm)
  of the choices after lm-eval's prompt; the generated answer is read as the choice it writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from softeval.errors import UserError
from softeval.tasks.base import (
    HELD_OUT_SEED,
    OFFLINE_SOURCE,
    Example,
    Splits,
    Task,
    _contains,
    file_n_tune,
    held_out_splits,
)
from softeval.tasks.lmeval_bridge import PREFIX, build, check_supported, entry, raw_config

FEWSHOT_SEED = 1234  # lm-eval's default fewshot_random_seed
DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's HF model default
MC_MAX_NEW_TOKENS = 32


class LmEvalSource:
    """One lm-eval task as softeval reads it: lm-eval's task object (built by ``load``) and its docs."""

    def __init__(self, name: str, include_path: str | None, output_type: str):
        self.name, self.include_path, self.output_type = name, include_path, output_type
        self.task = None

    @property
    def multiple_choice(self) -> bool:
        return self.output_type == "multiple_choice"

    def built(self):
        if self.task is None:
            raise RuntimeError(f"lm-eval:{self.name} is used before its data is loaded (Task.splits)")
        return self.task

    def load(self, source: str = "offline", skip_bad_rows: bool = False, **_options) -> Splits:
        task, data = build(self.name, source, self.include_path)
        self.task = task
        if self.multiple_choice and task.config.target_delimiter != " ":
            raise UserError(f"lm-eval:{self.name}: a target_delimiter other than one space is not supported yet")
        config = task.config
        eval_split = config.test_split if task.has_test_docs() else config.validation_split
        scored = [self.example(doc, f"{eval_split}/{i}", i) for i, doc in enumerate(task.eval_docs)]
        where = OFFLINE_SOURCE if data is not None else f"lm-eval ({config.dataset_path})"
        note = data.note if data is not None else ""
        if not self.multiple_choice and not self.regex_filtered():
            note = "; ".join(p for p in (note, "format: n/a (the task has no regex filter: every output is an "
                                                "answer)") if p)
        tune_split = (config.training_split if task.has_training_docs() else
                      config.validation_split if task.has_validation_docs() and eval_split != config.validation_split
                      else None)
        if tune_split is None:
            splits = held_out_splits(scored, file_n_tune(len(scored)), HELD_OUT_SEED, where, str(eval_split),
                                     note=note)
        else:
            docs = task.training_docs() if tune_split == config.training_split else task.validation_docs()
            tune = [self.example(doc, f"{tune_split}/{i}", -1) for i, doc in enumerate(docs)]
            splits = Splits(tune, scored, where, str(tune_split), str(eval_split), note=note,
                            held_out=bool(data and data.held_out), seed=data.seed if data else None)
        splits.shot_pool = self.shot_pool()
        return splits

    def shot_pool(self) -> tuple[str, int]:
        """lm-eval's few-shot pool: its name and the most shots it gives an item (one fewer where it is
        the scored split: lm-eval leaves the item itself out)."""
        task = self.built()
        sampler = getattr(task, "sampler", None)
        docs = sampler.fewshot_docs() if sampler is not None else []
        config = task.config
        split = task.fewshot_cfg.split or (config.training_split if task.has_training_docs() else
                                           config.validation_split if task.has_validation_docs() else
                                           config.test_split)
        itself = task.fewshot_cfg.split is not None and task.fewshot_cfg.split == config.test_split
        return f"few-shot examples (lm-eval's {split} split)", max(0, len(docs) - itself)

    def example(self, doc: dict, ident: str, index: int) -> Example:
        """One doc: its zero-shot prompt (lm-eval's, no chat template), its target and, for multiple
        choice, its choices; ``index``: its place among the scored docs (-1 for a tuning doc)."""
        task = self.built()
        text = task.fewshot_context(doc, 0, gen_prefix=task.doc_to_prefix(doc))
        gold = task.doc_to_target(doc)
        fields = {"doc": doc, "index": index, "text": text}
        if self.multiple_choice:
            choices = [str(c) for c in task.doc_to_choice(doc)]
            first = gold[0] if isinstance(gold, list) else gold
            gold_index = first if isinstance(first, int) else choices.index(str(first))
            fields.update(choices=choices, gold_index=gold_index, target=" " + choices[gold_index])
            return Example(ident, fields, choices[gold_index])
        answer = str(gold[0] if isinstance(gold, list) else gold)
        fields["target"] = task.config.target_delimiter + answer
        return Example(ident, fields, self.final_answer(fields["target"], doc))

    def final_answer(self, target: str, doc: dict) -> str:
        """The gold answer shown in samples (``answers.gold``): what the strict filter reads from the
        target (gsm8k: the number after ``####``, not the whole solution), else the target itself.
        Display only: correctness is the task's own metric against its own target."""
        value, fallback = self.filtered(self.pipelines()[0], target, Example("", {"doc": doc}, ""))
        return target.strip() if fallback or not str(value).strip() else str(value).strip()

    def contexts(self, examples: Sequence[Example], k: int, chat: Callable | None) -> list[str]:
        """lm-eval's prompts of ``examples`` with ``k`` shots: the sampler seeded as ``simple_evaluate``
        seeds it, each item's shots drawn in document order, as lm-eval draws them for the same docs."""
        task = self.built()
        task.set_fewshot_seed(FEWSHOT_SEED)
        out: list[str] = [""] * len(examples)
        for j in sorted(range(len(examples)), key=lambda j: examples[j].fields["index"]):
            doc = examples[j].fields["doc"]
            out[j] = task.fewshot_context(doc, k, apply_chat_template=chat is not None,
                                          fewshot_as_multiturn=chat is not None, chat_template=chat,
                                          gen_prefix=task.doc_to_prefix(doc))
        return out

    # ---- reading an output --------------------------------------------------------------------

    def pipelines(self) -> tuple:
        """The strict and the lenient filter pipelines (lm-eval's ``filter_list``)."""
        filters = list(self.built()._filters)
        strict = next((f for f in filters if "strict" in f.name), filters[0])
        lenient = next((f for f in filters if f is not strict), strict)
        return strict, lenient

    def regex_filtered(self) -> bool:
        return any(hasattr(f(), "fallback") for f in self.pipelines()[0].filters)

    def filtered(self, pipeline, output: str, example: Example) -> tuple[object, bool]:
        """The answer ``pipeline`` reads from ``output``, and whether it is a regex's fallback."""
        resps, docs, fallbacks = [[output]], [example.fields["doc"]], []
        for make in pipeline.filters:
            step = make()
            if hasattr(step, "fallback"):
                fallbacks.append(step.fallback)
            resps = list(step.apply(resps, docs))
        value = resps[0]
        if isinstance(value, list):
            value = value[0] if value else ""
        return value, any(value == f for f in fallbacks)

    def answer(self, pipeline, output: str, example: Example) -> str | None:
        value, fallback = self.filtered(pipeline, output, example)
        return None if fallback else str(value)

    def metrics(self, answer: object, example: Example) -> dict:
        return self.built().process_results(example.fields["doc"], [answer])

    def match(self, answer: str | None, example: Example) -> bool:
        """Correct: the task's first metric is 1 for the answer (lm-eval's own ``process_results``)."""
        if answer is None:
            return False
        if self.multiple_choice:
            return answer == example.gold
        value = _first_number(self.metrics(answer, example))
        return value is not None and value[1] >= 1.0

    def item_metrics(self, output: str, example: Example) -> dict:
        """Every filter pipeline's answer and its metrics, as lm-eval computes them (generative tasks)."""
        if self.multiple_choice:
            return {}
        out = {}
        for pipeline in self.built()._filters:
            value, _ = self.filtered(pipeline, output, example)
            out[pipeline.name] = {"answer": value, **{k: _plain(v) for k, v in self.metrics(value, example).items()}}
        return out

    def task_metrics(self, samples: Sequence[dict]) -> dict:
        """lm-eval's per-task scores of a run's samples, as ``simple_evaluate`` reports them: each metric of
        each filter pipeline (``"metric,filter"``) by the task's own aggregation function over the per-item
        values (``mean`` for exact_match; corpus ``bleu``, ``f1``, ... for others), its stderr where lm-eval
        has a closed form (mean), ``sample_len``, and what ``correct`` means for this task. Multiple
        choice: ``acc,none`` and ``acc_norm,none`` from the cloze scores."""
        from lm_eval.api.metrics import acc_all, mean, stderr_for_metric

        task = self.built()
        aggregation = task.aggregation()
        if self.multiple_choice:
            per_item = {("acc", "none"): [float(s["cloze_correct"]) for s in samples if "cloze_correct" in s],
                        ("acc_norm", "none"): [float(s["cloze_norm_correct"]) for s in samples
                                               if "cloze_norm_correct" in s]}
            correct = ("the generated answer is the gold choice's text (acc, acc_norm: from the choices' "
                       "log-likelihoods)")
        else:
            per_item = {(metric, pipe): [s["lm_eval"][pipe][metric] for s in samples]
                        for pipe in (f.name for f in task._filters) for metric in aggregation
                        if all(metric in s.get("lm_eval", {}).get(pipe, {}) for s in samples)}
            correct = self.correct_means(samples)
        scores: dict = {}
        for (metric, pipe), values in per_item.items():
            if not values:
                continue
            function = aggregation.get(metric, mean)
            scores[f"{metric},{pipe}"] = _plain(function(values))
            closed_form = function in (mean, acc_all) and len(values) > 1
            scores[f"{metric}_stderr,{pipe}"] = (_plain(stderr_for_metric(function, 1)(values)) if closed_form
                                                 else "N/A")
        return {"metrics": scores, "sample_len": len(samples), "correct": correct}

    def correct_means(self, samples: Sequence[dict]) -> str:
        """What ``correct`` (and so ``accuracy``) is for this generative task: its first metric whose
        per-item value is a number, at 1 for the strict answer; said as a partial credit where that metric
        is not 0/1 per item (f1), and as meaningless where no metric is a number per item (bleu's pairs)."""
        strict = self.pipelines()[0].name
        rows = [s.get("lm_eval", {}).get(strict, {}) for s in samples]
        found = _first_number({k: v for k, v in rows[0].items() if k != "answer"}) if rows else None
        if found is None:
            return ("no metric of this task is a number per item (e.g. bleu's reference/prediction pairs): correct "
                    "is false for every item and accuracy says nothing; the task's score is metrics.lm_eval, by "
                    "lm-eval's own aggregation")
        metric = found[0]
        binary = all(r.get(metric) in (0, 1, 0.0, 1.0, True, False) for r in rows)
        said = f"{metric} of the {strict} answer is 1"
        return said + (" (0/1 per item: accuracy is lm-eval's score)" if binary else
                       f" (full credit; {metric} is not 0/1 per item: the task's score is metrics.lm_eval, by "
                       "lm-eval's own aggregation)")

    def strict_choice(self, output: str, example: Example) -> str | None:
        """Multiple choice, generated: the choice the output's first line is (trailing period aside)."""
        lines = output.strip().splitlines()
        first = lines[0].strip().rstrip(".").strip() if lines else ""
        hits = [c for c in example.fields["choices"] if c.strip().rstrip(".").strip() == first]
        return hits[0] if hits else None

    def lenient_choice(self, output: str, example: Example) -> str | None:
        """The strict choice, else the one choice whose text the output contains."""
        strict = self.strict_choice(output, example)
        if strict is not None:
            return strict
        hits = [c for c in example.fields["choices"] if c.strip() and _contains(output.lower(), c.lower())]
        return hits[0] if len(hits) == 1 else None


def _first_number(values: dict) -> tuple[str, float] | None:
    """The first metric whose per-item value is a number (not a tuple a corpus aggregation reads), and it."""
    for key, value in values.items():
        if isinstance(value, int | float) or type(value).__module__ == "numpy" and getattr(value, "ndim", 1) == 0:
            return key, float(value)
    return None


def _plain(value):
    """A metric value as JSON holds it (numpy scalars to floats, tuples to lists)."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def lmeval_task(task_name: str, include_path: str | None = None) -> Task:
    """The softeval Task of ``lm-eval:NAME`` (refusals before any data or model loads: the extra missing,
    an unknown name, a group, an output type softeval does not run)."""
    name = task_name[len(PREFIX):]
    found = entry(name, include_path)
    cfg = raw_config(found)
    check_supported(name, found, cfg)
    output = cfg.get("output_type", "generate_until")
    src = LmEvalSource(name, include_path, output)
    gen = dict(cfg.get("generation_kwargs") or {})
    until = gen.get("until", [cfg.get("fewshot_delimiter", "\n\n")])
    multiple_choice = src.multiple_choice
    return Task(
        name=task_name,
        description=f"lm-eval task {name} ({output})",
        instruction="",
        render=lambda e: e.fields["text"],
        target=lambda e: e.fields["target"],
        strict=(src.strict_choice if multiple_choice else lambda o, e: src.answer(src.pipelines()[0], o, e)),
        lenient=(src.lenient_choice if multiple_choice else lambda o, e: src.answer(src.pipelines()[1], o, e)),
        match=src.match,
        load=src.load,
        stop=("\n",) if multiple_choice else tuple([until] if isinstance(until, str) else until),
        max_new_tokens=MC_MAX_NEW_TOKENS if multiple_choice else int(
            gen.get("max_gen_toks", gen.get("max_new_tokens", DEFAULT_MAX_GEN_TOKS))),
        sources=("offline", "hub"),
        extra={"item_metrics": src.item_metrics, "lm_eval": src, "source_metrics": src.task_metrics},
        cloze=(lambda e: e.fields["text"]) if multiple_choice else None,
        cloze_choices=(lambda e: (e.fields["choices"], e.fields["gold_index"])) if multiple_choice else None,
        cue="",
        contexts=src.contexts,
    )
