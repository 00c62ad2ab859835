"""vLLM's log-likelihoods (``VllmEngine.loglikelihood``: prompt log-probabilities of token-id prompts) against
the HF engine's (``HfEngine.loglikelihood``: lm/loglik), on the same MMLU items and token ids (BENCHMARKS.md,
"vLLM backend", "Log-likelihoods").

Two kinds of request, as a run's scoring makes them: ``cloze`` (each item's four option texts after its cloze
prompt: several tokens each, the cloze reference and ``acc_norm``) and ``letters`` (the four letters after the
lettered prompt: one token each, as ``--permutations`` asks). Per kind: the share of items whose pick (the
option of the highest log-likelihood) is the same on both engines, the largest absolute difference of a summed
log-likelihood, and each engine's time (best of ``--repeat``; vLLM's engine start timed apart). Zero-shot
prompts of the packaged SmolLM2 by default, fp32 on CPU, the chat template as a run would use it.

    .venv-vllm/bin/python benchmarks/vllm_loglik.py [--items 100] [--repeat 2] [--json-out F]
"""

from __future__ import annotations

import argparse
import json
import time

MODEL = "smollm2-135m-instruct"


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--items", type=int, default=100, help="MMLU test items (seeded, as --limit picks them)")
    parser.add_argument("--repeat", type=int, default=2, help="timed rounds per engine; the best counts")
    parser.add_argument("--batch-size", type=int, default=16, help="the HF engine's (--eval-batch-size)")
    parser.add_argument("--json-out")
    return parser.parse_args(argv)


def requests(lm, n: int) -> dict[str, tuple[list[list[int]], list[list[list[int]]]]]:
    """Per kind, the contexts and continuations a zero-shot MMLU run of ``lm`` asks for on its first ``n`` items."""
    from softeval.run.prompting import Prompter
    from softeval.tasks import get_task
    from softeval.tasks.data import seeded_subset

    task = get_task("mmlu")
    examples = seeded_subset(task.splits().eval, n, 0)
    prompter = Prompter(lm, task, lm.has_chat_template and lm.kind == "post-trained", [])
    cloze = [prompter.cloze_ids(e, "zero-shot") for e in examples]
    return {"cloze": ([c for c, _ in cloze], [o for _, o in cloze]),
            "letters": ([prompter.ids(e, "zero-shot") for e in examples], [prompter.option_ids(e) for e in examples])}


def compared(hf: list[list[float]], vllm: list[list[float]]) -> dict:
    """Picks that agree (the first of equal maxima, as a run picks) and the largest absolute difference."""
    def pick(values):
        return max(range(len(values)), key=values.__getitem__)

    same = sum(pick(a) == pick(b) for a, b in zip(hf, vllm))
    worst = max(abs(x - y) for a, b in zip(hf, vllm) for x, y in zip(a, b))
    return {"items": len(hf), "same_pick": same, "agreement": same / len(hf), "max_abs_diff": worst}


def best_of(fn, repeat: int) -> tuple[list[list[float]], float]:
    times, value = [], None
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return value, min(times)


def measure(hf_engine, vllm_engine, asked: dict, repeat: int = 1) -> dict:
    """Each kind's log-likelihoods on both engines: agreement, largest difference, each engine's seconds."""
    out = {}
    for kind, (contexts, conts) in asked.items():
        hf, hf_s = best_of(lambda c=contexts, o=conts: hf_engine.loglikelihood(c, o), repeat)
        ours, vllm_s = best_of(lambda c=contexts, o=conts: vllm_engine.loglikelihood(c, o), repeat)
        out[kind] = {**compared(hf, ours), "continuations": sum(map(len, conts)),
                     "hf_s": round(hf_s, 3), "vllm_s": round(vllm_s, 3), "hf_over_vllm": round(hf_s / vllm_s, 3)}
    return out


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    import torch  # here: --help answers before torch and vLLM load

    from softeval.lm.hf_engine import HfEngine
    from softeval.lm.models import load_model
    from softeval.lm.vllm_engine import VllmEngine

    lm = load_model(args.model, device="cpu", dtype="float32")
    asked = requests(lm, args.items)
    started = time.perf_counter()
    engine = VllmEngine(lm)
    result = {"model": args.model, "items": args.items, "torch_threads": torch.get_num_threads(),
              "vllm": engine.version, "engine_args": engine.record()["engine_args"], "cpu_env": engine.env,
              "vllm_start_s": round(time.perf_counter() - started, 1)}
    try:
        result["kinds"] = measure(HfEngine(lm, args.batch_size), engine, asked, args.repeat)
    finally:
        engine.close()
    print(f"{args.model}, MMLU zero-shot, {args.items} items, vLLM {engine.version} (engine start "
          f"{result['vllm_start_s']} s), torch threads {result['torch_threads']}")
    print(f"{'kind':8} {'conts':>6} {'same pick':>10} {'max |diff|':>11} {'HF s':>7} {'vLLM s':>7} {'HF/vLLM':>8}")
    for kind, row in result["kinds"].items():
        print(f"{kind:8} {row['continuations']:6d} {row['same_pick']:>4d}/{row['items']:<5d} "
              f"{row['max_abs_diff']:11.2e} {row['hf_s']:7.2f} {row['vllm_s']:7.2f} {row['hf_over_vllm']:7.2f}x")
    text = json.dumps(result, indent=1)
    print(text)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
