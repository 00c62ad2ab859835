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


def test_generation_ends_where_the_answer_is_complete_and_cuts_there():
    """A task's ``answer_end`` ends a row as a stop string does: the text is the free output cut where the rule
    says (``generation.finish``, the cut vLLM makes after generating on), and it did not hit the limit."""
    lm = tiny_lm(seed=3, init_range=0.5)
    seqs = [lm.tokenizer("Q: abc\nA:").input_ids, lm.tokenizer("Q: d\nA:").input_ids]
    free = generation.generate(lm, seqs, max_new_tokens=12)
    marker = free.texts[0][3:5]  # written by the first row after a few tokens

    def answer_end(text: str) -> int | None:
        at = text.find(marker)
        return None if at == -1 else at + 1  # the cut falls inside what was written: any index, not its end

    ended = generation.generate(lm, seqs, max_new_tokens=12, answer_end=answer_end)
    for text, cut, got, hit in zip(free.texts, free.hit_limit, ended.texts, ended.hit_limit):
        if marker in text:
            assert got == text[:text.find(marker) + 1] == generation.finish(text, (), answer_end)[0]
            assert hit is False
        else:
            assert (got, hit) == (text, cut)
    assert ended.texts[0] != free.texts[0] and ended.hit_limit[0] is False
    assert generation.finish("abc", ()) == ("abc", False)
    assert generation.finish("a\nb", ("\n",)) == ("a", True)
