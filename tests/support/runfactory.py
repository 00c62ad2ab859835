"""Synthetic run folders in the format of docs/reference/run-format.md, for the index, compare and report tests.

Metrics in results.json are computed from the per-item outcomes written to samples.jsonl, with Wilson
intervals, so a test that recomputes a score from samples gets the same number as the file says.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from softeval.methods import known, spec_of, tuned_names
from softeval.store.format import Run, task_label
from softeval.store.record import RESULTS_FORMAT_VERSION


def wilson(k: float, n: int, z: float = 1.959964) -> tuple[float | None, float | None, float | None]:
    if n == 0:
        return None, None, None
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return p, max(0.0, centre - half), min(1.0, centre + half)


def _metric(k: float, n: int) -> dict[str, Any]:
    value, low, high = wilson(k, n)
    return {"value": value, "ci_low": low, "ci_high": high, "n": n}


@dataclass(frozen=True)
class Items:
    """The per-item outcomes beside strict correctness, and the items' ids; each None: format always followed,
    lenient = strict, no letter log-likelihood or cloze scores, ids ``TASK/test/i``."""

    format_ok: Sequence[bool] | None = None
    lenient_correct: Sequence[bool] | None = None
    loglik_correct: Sequence[bool] | None = None
    cloze_correct: Sequence[bool] | None = None
    ids: Sequence[str] | None = None


@dataclass(frozen=True)
class Extras:
    """What a run folder holds beside its outcomes: results.json's model kind, tuning and config, the curve
    (curve.jsonl); ``partial``: the folder of a run not finished (``.partial``)."""

    model_kind: str = "base"
    curve: list[dict[str, Any]] | None = None
    tuning: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    partial: bool = False


def _ids(task: str, n: int, items: Items) -> list[str]:
    return list(items.ids) if items.ids is not None else [f"{task}/test/{i}" for i in range(n)]


def _samples(task: str, correct: Sequence[bool], items: Items) -> list[dict[str, Any]]:
    """samples.jsonl's rows: gold letters in turn, a wrong answer the next letter, no strict answer off format."""
    n = len(correct)
    format_ok = list(items.format_ok) if items.format_ok is not None else [True] * n
    lenient_correct = list(items.lenient_correct) if items.lenient_correct is not None else list(correct)
    ids = _ids(task, n, items)
    if any(c and not f for c, f in zip(correct, format_ok)):
        raise ValueError("an item cannot be strictly correct without following the format")
    samples = []
    for i in range(n):
        gold = "ABCD"[i % 4]
        wrong = "ABCD"[(i + 1) % 4]
        strict = (gold if correct[i] else wrong) if format_ok[i] else None
        lenient = gold if lenient_correct[i] else wrong
        sample = {
            "id": ids[i], "prompt": f"Question {i} about {task}?\nA. a\nB. b\nC. c\nD. d\nAnswer:",
            "output": (f" {strict}" if strict else f" I think the answer is {lenient}."),
            "strict": strict, "lenient": lenient, "gold": gold, "format_ok": bool(format_ok[i]),
            "correct": bool(correct[i]), "lenient_correct": bool(lenient_correct[i]),
        }
        if items.loglik_correct is not None:
            sample["letter_loglik_pred"] = gold if items.loglik_correct[i] else wrong
            sample["letter_loglik_correct"] = bool(items.loglik_correct[i])
        if items.cloze_correct is not None:
            sample["cloze_correct"] = sample["cloze_norm_correct"] = bool(items.cloze_correct[i])
        sample["hit_max_new_tokens"] = False
        sample["failure"] = None if format_ok[i] else "wrong_style"
        samples.append(sample)
    return samples


def _metrics(samples: list[dict[str, Any]], items: Items) -> dict[str, Any]:
    """results.json's metrics, from the samples' outcomes."""
    n = len(samples)
    correct = [s["correct"] for s in samples]
    format_ok = [s["format_ok"] for s in samples]
    n_fmt = sum(format_ok)
    metrics = {
        "accuracy": _metric(sum(correct), n),
        "format_rate": _metric(n_fmt, n),
        "knowledge_accuracy": _metric(sum(c for c, f in zip(correct, format_ok) if f), n_fmt),
        "lenient_accuracy": _metric(sum(s["lenient_correct"] for s in samples), n),
    }
    if items.loglik_correct is not None:
        metrics["letter_loglik_accuracy"] = _metric(sum(items.loglik_correct), n)
    if items.cloze_correct is not None:
        metrics["cloze_accuracy"] = metrics["cloze_accuracy_norm"] = _metric(sum(items.cloze_correct), n)
    return metrics


def write_run(out: Path, model: str, task: str, method: str, correct: Sequence[bool], *, seed: int = 0,
              items: Items = Items(), extras: Extras = Extras()) -> Path:
    """Write one run folder; outcome lists default to 'format always followed, lenient = strict'."""
    samples = _samples(task, correct, items)
    variant = (extras.config or {}).get("prompt_variant", 0)  # a prompt variant's runs lie in <task>@v<N>
    run_dir = (out / model.replace("/", "--") / task_label(task, variant) / method
               / f"seed{seed}{'.partial' if extras.partial else ''}")
    run_dir.mkdir(parents=True, exist_ok=True)
    n = len(samples)
    failed = n - sum(s["format_ok"] for s in samples)
    text = "".join(json.dumps(s) + "\n" for s in samples)
    results = {  # every key of softeval.store.schema.ResultsRecord, in its order
        "format_version": RESULTS_FORMAT_VERSION, "softeval_version": "0.1.0", "model": model,
        "model_kind": extras.model_kind, "model_kind_source": "preset", "task": task, "method": method, "seed": seed,
        "n": n, "series": None, "step": None, "metrics": _metrics(samples, items),
        "answers": {key: [list(kv) for kv in Counter(s[key] for s in samples).most_common(5)]
                    for key in ("strict", "gold")},
        "format_failures": {"causes": {"empty": 0, "max_new_tokens": 0, "wrong_style": failed,
                                       "refusal_or_echo": 0, "other": 0},
                            "failed": failed, "hit_max_new_tokens": 0},
        "item_ids": _ids(task, n, items),
        "split": {"tune": "dev", "eval": "test", "held_out": False, "seed": 1234, "note": "synthetic"},
        "chat_template": False, "engine": {"backend": "hf"}, "truncated_prompts": 0, "unscorable": 0,
        "tuning": ({"steps": len(extras.curve or []), "lr": 0.03, **(extras.tuning or {})}
                   if method in tuned_names() else None),
        "config": extras.config or {}, "versions": {"python": "3.11"}, "git": None,
        "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:01:00+00:00",
        "wall_seconds": 60.0,
        "samples_count": n, "samples_sha256": hashlib.sha256(text.encode()).hexdigest(),
    }
    (run_dir / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    (run_dir / "samples.jsonl").write_text(text, encoding="utf-8")
    folder = spec_of(method).folder if known(method) else None
    if folder is not None:  # a finished tuned run holds what it trained (a stand-in: nothing reads it)
        (run_dir / folder).mkdir(exist_ok=True)
        (run_dir / folder / "adapter_model.safetensors").write_bytes(b"stand-in")
    if extras.curve is not None:
        (run_dir / "curve.jsonl").write_text("".join(json.dumps(c) + "\n" for c in extras.curve), encoding="utf-8")
    return run_dir


def outcomes(n: int, rate: float, offset: int = 0) -> list[bool]:
    """n deterministic outcomes with about `rate` of them True, spread evenly (no randomness)."""
    return [math.floor((i + offset + 1) * rate) > math.floor((i + offset) * rate) for i in range(n)]


def demo_curve(steps: int = 80, every: int = 10) -> list[dict[str, Any]]:
    """A learning curve that looks like the real thing: loss falls, format saturates, accuracy flat."""
    rows = []
    for step in range(1, steps + 1):
        measured = step % every == 0 or step == 1
        rows.append({
            "step": step, "loss": round(2.5 * math.exp(-step / 15) + 0.4, 4),
            "format_rate": round(1 - 0.9 * math.exp(-step / 12), 4) if measured else None,
            "accuracy": round(0.30 + 0.02 * math.sin(step), 4) if measured else None,
        })
    return rows


def demo_runs(out: Path, n: int = 60, name_prefix: str = "") -> list[tuple[str, str]]:
    """A small but complete runs folder: 4 base/post pairs, three methods on the bases, loglik,
    curves, and format failures that lenient scoring forgives. Returns the pairs."""
    pairs = []
    for i, (zero, few, soft, post) in enumerate([(0.15, 0.35, 0.30, 0.35), (0.25, 0.30, 0.45, 0.50),
                                                 (0.20, 0.50, 0.55, 0.60), (0.35, 0.40, 0.40, 0.45)]):
        base, partner = f"{name_prefix}base-{i}", f"{name_prefix}post-{i}"
        fmt = outcomes(n, min(1.0, zero + 0.35), offset=i)
        strict = [c and f for c, f in zip(outcomes(n, soft, offset=i), fmt)]
        write_run(out, base, "mmlu", "zero-shot", strict,
                  items=Items(format_ok=fmt, lenient_correct=outcomes(n, soft, offset=i),
                              loglik_correct=outcomes(n, soft + 0.05), cloze_correct=outcomes(n, soft + 0.1)))
        write_run(out, base, "mmlu", "few-shot", outcomes(n, few, offset=i),
                  items=Items(loglik_correct=outcomes(n, soft + 0.05)))
        write_run(out, base, "mmlu", "soft-prompt", outcomes(n, soft, offset=i),
                  items=Items(loglik_correct=outcomes(n, soft + 0.05)), extras=Extras(curve=demo_curve()))
        write_run(out, partner, "mmlu", "zero-shot", outcomes(n, post, offset=i),
                  extras=Extras(model_kind="post-trained"))
        pairs.append((base, partner))
    return pairs


def variant_run(method: str, variant: int, correct: list[bool], strict: list[bool] | None = None, seed: int = 0,
        task: str = "mmlu") -> Run:
    """A finished run of ``method`` under ``variant`` as analysis.compare.load_runs gives it, held in memory (no
    folder): one sample per item, ``correct`` and in format as given; for the spread's tests."""
    strict = strict if strict is not None else [True] * len(correct)
    samples = [{"id": f"q{i}", "correct": c, "strict": "A" if s else None} for i, (c, s) in enumerate(zip(correct,
                                                                                                         strict))]
    n = len(correct)
    results = {"model": "m", "task": task, "method": method, "seed": seed, "n": n,
               "metrics": {"accuracy": {"value": sum(correct) / n}, "format_rate": {"value": sum(strict) / n}},
               "config": {"prompt_variant": variant} if variant else {}}
    path = Path("runs/m") / task_label(task, variant) / method / f"seed{seed}"
    return Run(path, str(path), results, samples)
