"""Greedy generation (softeval.lm.generation): it says which outputs hit the token limit, and one cut at
a stop string did not."""

from __future__ import annotations

from tiny import tiny_lm

from softeval.lm import generation


def test_generation_says_which_outputs_hit_the_token_limit():
    lm = tiny_lm(seed=3, init_range=0.5)
    seqs = [lm.tokenizer("Q: abc\nA:").input_ids, lm.tokenizer("Q: d\nA:").input_ids]
    gen = generation.generate(lm, seqs, max_new_tokens=5)
    free, hit = gen.texts, gen.hit_limit
    assert hit == [True, True] and all(free)  # no stop strings, a random model rarely says EOS
    stop = free[0][1] if len(free[0]) > 1 else free[0][0]
    gen2 = generation.generate(lm, seqs, max_new_tokens=5, stop=(stop,))
    stopped, hit2 = gen2.texts, gen2.hit_limit
    assert hit2[0] is False and stopped[0] == generation.cut_at_stop(free[0], (stop,))
