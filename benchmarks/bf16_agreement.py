"""bf16 against fp32 on real MMLU items: how many generations and letter picks stay the same, for
the whole model in bf16 and for a bf16 body with the vocabulary head in fp32 (issue 15).

Not a test; slow where the CPU has no bf16 arithmetic (AVX2 only): run it on a host that has it.

    nice -n 10 .venv/bin/python benchmarks/bf16_agreement.py [N_ITEMS]
"""

from __future__ import annotations

import copy
import json
import sys

import torch

from softeval.lm import generation, loglik
from softeval.lm.models import load_model
from softeval.run.prompting import Prompter, use_chat_template
from softeval.tasks import get_task
from softeval.tasks.data import seeded_subset


class Fp32Head(torch.nn.Module):
    """The vocabulary head in fp32 over (bf16) hidden states."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = torch.nn.Parameter(weight.float().clone(), requires_grad=False)

    def forward(self, x):
        return torch.nn.functional.linear(x.float(), self.weight)


def main(n: int = 16) -> dict:
    lm = load_model("smollm2-135m-instruct")
    task = get_task("mmlu")
    items = seeded_subset(task.load("offline").eval, n, 0)
    prompter = Prompter(lm, task, use_chat_template(lm, "auto"), [])
    seqs = [prompter.ids(e, "zero-shot") for e in items]
    opts = [prompter.option_ids(e) for e in items]

    def run():
        gens = generation.generate(lm, seqs, max_new_tokens=task.max_new_tokens, stop=task.stop, batch_size=8).texts
        return gens, torch.tensor(loglik.option_logprobs(lm, seqs, opts, batch_size=8))

    ref_g, ref_s = run()
    fp32 = lm.model
    correct = lambda s: sum(e.gold == "ABCD"[int(i)] for e, i in zip(items, s.argmax(-1)))
    out = {"n": n, "accuracy_fp32": correct(ref_s)}
    for variant in ("bf16", "bf16_body_fp32_head"):
        model = copy.deepcopy(fp32)
        head = model.get_output_embeddings().weight.detach().clone()
        model.to(torch.bfloat16)
        if variant != "bf16":
            model.lm_head = Fp32Head(head)
        lm.model = model
        gens, scores = run()
        out[variant] = {"generations_identical": sum(a == b for a, b in zip(gens, ref_g)),
                        "letter_argmax_identical": int((scores.argmax(-1) == ref_s.argmax(-1)).sum()),
                        "letter_logprob_max_abs_diff": round(float((scores - ref_s).abs().max()), 4),
                        "accuracy": correct(scores)}
        print(variant, out[variant], file=sys.stderr, flush=True)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 16)
