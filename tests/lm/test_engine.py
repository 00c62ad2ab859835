"""Option scores taken from the generation's first forward pass equal the separate scoring pass."""

import torch

from softeval.lm import generation, loglik
from softeval.lm.softprompt import SoftPrompt


def test_first_token_logprobs_match_option_logprobs(lm):
    soft = SoftPrompt.initialise(lm, 3, "vocab", seed=0).weight
    prompts = [lm.tokenizer(t).input_ids for t in ("Q: 1?\nA:", "Q: longer question here?\nA:", "Q: x\nA:")]
    letters = [[lm.tokenizer(f" {c}", add_special_tokens=False).input_ids[-1:]] for c in "ABCD"]
    options = [[o[0] for o in letters]] * len(prompts)
    for s in (None, soft):
        seen = {}

        def keep(indices, logprobs):
            for slot, i in enumerate(indices):
                seen[i] = [float(logprobs[slot, o[0]]) for o in options[i]]

        generation.generate(lm, prompts, soft=s, max_new_tokens=2, batch_size=2, on_first_logprobs=keep)
        direct = loglik.option_logprobs(lm, prompts, options, soft=s, batch_size=2)
        assert sorted(seen) == [0, 1, 2]
        for i in range(3):
            torch.testing.assert_close(torch.tensor(seen[i]), torch.tensor(direct[i]), atol=1e-5, rtol=1e-5)
