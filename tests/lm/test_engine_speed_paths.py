"""Every speed path of the engine gives what the plain path gives (tiny random model, fp32)."""

import pytest
import torch
from tiny import plain_target_loss, tiny_lm

from softeval.lm import batching, generation, kv_cache, loglik, memory, tuning_loss
from softeval.lm.softprompt import SoftPrompt

INSTRUCTION = "Answer with one letter. Here are worked examples:\nQ: abc\nA: a\n\nQ: "
QUESTIONS = ["d", "efg hij", "klm", "nopqrs tu", "v", "wxyz 1234 567", "ab", "cdefgh"]


@pytest.fixture
def lm():
    return tiny_lm(seed=3, init_range=0.5)


def _seqs(lm):
    return [lm.tokenizer(INSTRUCTION + q + "\nA:").input_ids for q in QUESTIONS]


def _soft(lm, n=3):
    torch.manual_seed(1)
    return torch.randn(n, lm.model.config.hidden_size) * 0.5


@pytest.mark.parametrize("with_soft", [False, True])
def test_prefix_cache_generations_identical(lm, with_soft):
    seqs, soft = _seqs(lm), _soft(lm) if with_soft else None
    assert batching.common_prefix_len(seqs) > kv_cache.MIN_PREFIX
    kw = {"soft": soft, "max_new_tokens": 12, "stop": ("\n",), "batch_size": 3}
    plain = generation.generate(lm, seqs, prefix_cache=False, **kw).texts
    cached = generation.generate(lm, seqs, prefix_cache=True, **kw).texts
    assert cached == plain
    assert any(plain)  # the model does generate something


def test_prefix_cache_with_soft_prompt_only(lm):
    seqs = [lm.tokenizer(q, add_special_tokens=False).input_ids for q in QUESTIONS]  # no shared tokens
    assert batching.common_prefix_len(seqs) == 0
    soft = _soft(lm, 9)
    kw = {"soft": soft, "max_new_tokens": 8, "batch_size": 4}
    assert (generation.generate(lm, seqs, prefix_cache=True, **kw).texts
            == generation.generate(lm, seqs, prefix_cache=False, **kw).texts)


@pytest.mark.parametrize("with_soft", [False, True])
def test_prefix_cache_loglik_identical(lm, with_soft):
    seqs, soft = _seqs(lm), _soft(lm) if with_soft else None
    tok = lambda t: lm.tokenizer(t, add_special_tokens=False).input_ids
    single = [[tok(" " + c) for c in "ABCD"] for _ in seqs]
    multi = [[tok(" yes"), tok(" no"), tok(" a b c")] for _ in seqs]
    for options in (single, multi):
        plain = loglik.option_logprobs(lm, seqs, options, soft=soft, batch_size=3, prefix_cache=False)
        cached = loglik.option_logprobs(lm, seqs, options, soft=soft, batch_size=3, prefix_cache=True)
        torch.testing.assert_close(torch.tensor(cached), torch.tensor(plain), rtol=1e-6, atol=1e-5)


def test_stop_on_decoded_tail_matches_full_text(lm):
    seqs = _seqs(lm)
    free = generation.generate(lm, seqs, max_new_tokens=16, batch_size=4).texts
    for stop in (("\n",), ("a", "Q:"), (" ", "zz")):
        stopped = generation.generate(lm, seqs, max_new_tokens=16, stop=stop, batch_size=4).texts
        assert stopped == [generation.cut_at_stop(f, stop) for f in free]


def test_length_batches_return_results_in_caller_order(lm):
    seqs = _seqs(lm)
    assert sorted(i for b in batching.length_batches([len(s) for s in seqs], 3) for i in b) == list(range(len(seqs)))
    together = generation.generate(lm, seqs, max_new_tokens=6, batch_size=3).texts
    alone = [generation.generate(lm, [s], max_new_tokens=6, prefix_cache=False).texts[0] for s in seqs]
    assert together == alone
    tok = lambda t: lm.tokenizer(t, add_special_tokens=False).input_ids
    options = [[tok(" A"), tok(" B")] for _ in seqs]
    batched = loglik.option_logprobs(lm, seqs, options, batch_size=3)
    single = [loglik.option_logprobs(lm, [s], [o], prefix_cache=False)[0] for s, o in zip(seqs, options)]
    torch.testing.assert_close(torch.tensor(batched), torch.tensor(single), rtol=1e-6, atol=1e-5)


def test_length_grouped_tuning_plan_is_deterministic_and_keeps_items():
    from softeval.run.tuning_loop import batches, length_grouped

    plan = batches(50, 8, 12, seed=5)
    lengths = {i: (i * 37) % 23 for i in range(50)}
    grouped = length_grouped(plan, lengths.__getitem__, window=4, seed=5)
    assert grouped == length_grouped(plan, lengths.__getitem__, window=4, seed=5)
    assert [len(b) for b in grouped] == [len(b) for b in plan]
    for w in range(0, 12, 4):
        assert sorted(i for b in grouped[w:w + 4] for i in b) == sorted(i for b in plan[w:w + 4] for i in b)
    spread = lambda p: sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in p)
    assert spread(grouped) < spread(plan)
    assert length_grouped(plan, lengths.__getitem__, window=1) == plan


def test_auto_batch_size_never_exceeds_bound(lm, monkeypatch):
    for free in (10**6, 10**9, 10**15):
        monkeypatch.setattr(memory, "_free_bytes", lambda device, free=free: free)
        for bound in (1, 2, 7, 64):
            for seq_len in (4, 100, 4000):
                size = memory.auto_batch_size(lm, seq_len, max_batch_size=bound, new_tokens=16)
                assert 1 <= size <= bound
    monkeypatch.setattr(memory, "_free_bytes", lambda device: 10**15)
    assert memory.auto_batch_size(lm, 10, max_batch_size=5) == 5
    monkeypatch.setattr(memory, "_free_bytes", lambda device: 1)
    assert memory.auto_batch_size(lm, 10, max_batch_size=5) == 1


def test_auto_batch_size_in_generate_and_loglik(lm, monkeypatch):
    seqs = _seqs(lm)
    seen = []
    real = generation._generate_batch

    def spy(lm_, batch, *args, **kw):
        seen.append(len(batch))
        return real(lm_, batch, *args, **kw)

    monkeypatch.setattr(memory, "_free_bytes", lambda device: 10**15)
    monkeypatch.setattr(generation, "_generate_batch", spy)
    auto = generation.generate(lm, seqs, max_new_tokens=5, batch_size="auto", max_batch_size=3).texts
    assert seen and max(seen) <= 3
    assert auto == generation.generate(lm, seqs, max_new_tokens=5, batch_size=8).texts
    tok = lambda t: lm.tokenizer(t, add_special_tokens=False).input_ids
    options = [[tok(" A"), tok(" B")] for _ in seqs]
    torch.testing.assert_close(
        torch.tensor(loglik.option_logprobs(lm, seqs, options, batch_size=0, max_batch_size=2)),
        torch.tensor(loglik.option_logprobs(lm, seqs, options, batch_size=8)), rtol=1e-6, atol=1e-5)


def test_length_grouped_tuning_is_deterministic():
    from tiny import format_task

    from softeval.run.prompting import Prompter
    from softeval.run.tuning_loop import TuneConfig, tune

    lm = tiny_lm()
    task = format_task()
    prompter = Prompter(lm, task, chat=False, shots=[])
    cfg = TuneConfig(num_tokens=3, steps=4, curve_every=0, seed=7, length_group=2)
    a = tune(lm, prompter, task.load().tune, [], cfg)
    b = tune(lm, prompter, task.load().tune, [], cfg)
    torch.testing.assert_close(a.part.weight, b.part.weight)
    assert a.steps_run == 4 and a.config["length_group"] == 2


def test_tuning_passes_fit_budget_and_cover_batch():
    lengths = [50, 10, 30, 12, 200, 11, 29, 31]
    passes = batching.tuning_passes(lengths, max_tokens=64)
    assert sorted(i for p in passes for i in p) == list(range(len(lengths)))
    for p in passes:
        assert len(p) == 1 or len(p) * max(lengths[i] for i in p) <= 64
    assert [4] in passes  # a row longer than the budget gets a pass of its own
    assert batching.tuning_passes(lengths, max_tokens=10_000) == [sorted(range(8), key=lambda i: lengths[i])]


@pytest.mark.parametrize("max_pass_tokens", [1, 40, 10_000])
def test_split_backward_gives_whole_batch_gradient(lm, max_pass_tokens):
    seqs = _seqs(lm)
    prompts = [s[:-2] for s in seqs]
    targets = [s[-2:] + [lm.tokenizer.eos_token_id] * (k % 3) for k, s in enumerate(seqs)]
    whole = _soft(lm).requires_grad_(True)
    loss = tuning_loss.target_loss(lm, prompts, targets, whole)
    loss.backward()
    split = _soft(lm).requires_grad_(True)
    split_loss = tuning_loss.target_loss_backward(lm, prompts, targets, split, max_pass_tokens=max_pass_tokens)
    assert split_loss == pytest.approx(float(loss.detach()), rel=1e-5)
    torch.testing.assert_close(split.grad, whole.grad, atol=1e-6, rtol=1e-4)
    assert all(not p.requires_grad or p.grad is None for p in lm.model.parameters())


def _ragged(lm):
    seqs = _seqs(lm)
    cut = [2, 9, 1, 5, 14, 3]  # targets of very different lengths in one batch
    return [s[:-c] for s, c in zip(seqs, cut)], [s[-c:] for s, c in zip(seqs, cut)]


def test_target_head_loss_and_gradient_equal_the_models_own_logits(lm):
    prompts, targets = _ragged(lm)
    assert tuning_loss.target_head(lm) is not None  # Llama: output embedding, nothing else
    fast, plain = _soft(lm).requires_grad_(True), _soft(lm).requires_grad_(True)
    loss = tuning_loss.target_loss(lm, prompts, targets, fast)
    loss.backward()
    reference = plain_target_loss(lm, prompts, targets, plain)
    reference.backward()
    assert loss.item() == pytest.approx(reference.item(), rel=1e-5)
    torch.testing.assert_close(fast.grad, plain.grad, atol=1e-6, rtol=1e-4)


def test_target_head_applies_final_logit_softcapping():
    """Gemma 2 caps its logits (tanh) after the head; the shortcut must do the same to be used."""
    from tiny import tiny_tokenizer
    from transformers import Gemma2Config, Gemma2ForCausalLM

    from softeval.lm.models import BASE, LoadedModel

    tok = tiny_tokenizer()
    torch.manual_seed(0)
    config = Gemma2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, final_logit_softcapping=0.5,
                          initializer_range=0.5, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = Gemma2ForCausalLM(config).eval().requires_grad_(False)
    capped = LoadedModel(model, tok, "tiny-gemma2", BASE, "test", pad_id=0, eos_ids=(2,))
    assert tuning_loss.target_head(capped) is not None
    prompts, targets = _ragged(capped)
    soft = _soft(capped)
    assert tuning_loss.target_loss(capped, prompts, targets, soft).item() == pytest.approx(
        plain_target_loss(capped, prompts, targets, soft).item(), rel=1e-5)


def test_a_head_with_an_unknown_logit_step_falls_back_to_the_models_logits(lm):
    """A model that scales its logits after the head (as Cohere or Granite do) must not be tuned
    against unscaled logits: the check at first use sees the mismatch and the plain path is used."""
    class Scaled(type(lm.model)):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = out.logits * 0.25
            return out

    lm.model.__class__ = Scaled
    assert tuning_loss.target_head(lm) is None
    prompts, targets = _ragged(lm)
    soft = _soft(lm)
    assert float(tuning_loss.target_loss(lm, prompts, targets, soft)) == pytest.approx(
        float(plain_target_loss(lm, prompts, targets, soft)), rel=1e-5)


@pytest.mark.parametrize("with_soft", [False, True])
def test_growing_cache_matches_dynamic_cache(lm, monkeypatch, with_soft):
    seqs, soft = _seqs(lm), _soft(lm) if with_soft else None
    kw = {"soft": soft, "max_new_tokens": 70, "stop": (), "batch_size": 3}
    growing = [generation.generate(lm, seqs, prefix_cache=p, **kw).texts for p in (False, True)]
    monkeypatch.setattr(kv_cache, "GROWING_CACHE", False)
    dynamic = [generation.generate(lm, seqs, prefix_cache=p, **kw).texts for p in (False, True)]
    assert growing == dynamic
    assert max(len(lm.tokenizer(t).input_ids) for t in dynamic[0]) > 60  # rows run past the first buffer's room


def test_growing_layer_keeps_rows_after_select():
    layer = kv_cache.GrowingLayer()
    k = torch.arange(2 * 1 * 3 * 2, dtype=torch.float).reshape(2, 1, 3, 2)
    layer.update(k, -k)
    layer.batch_select_indices(torch.tensor([1]))
    new = torch.full((1, 1, 1, 2), 7.0)
    keys, values = layer.update(new, -new)
    torch.testing.assert_close(keys, torch.cat([k[1:], new], dim=2))
    torch.testing.assert_close(values, -torch.cat([k[1:], new], dim=2))
    assert layer.get_seq_length() == 4


def test_tuning_pass_tokens_follow_the_memory_budget(lm, monkeypatch):
    base = memory.tuning_pass_tokens(lm)
    assert base >= 1
    monkeypatch.setattr(memory, "CPU_TUNING_PASS_BYTES", memory.CPU_TUNING_PASS_BYTES * 4)
    assert memory.tuning_pass_tokens(lm) == pytest.approx(4 * base, rel=0.01)


def test_to_growing_swaps_only_plain_dynamic_caches():
    from transformers.cache_utils import DynamicCache, DynamicSlidingWindowLayer

    k = torch.randn(2, 1, 5, 4)
    plain = DynamicCache()
    plain.update(k, -k, 0)
    grown = kv_cache.to_growing(plain)
    assert type(grown.layers[0]) is kv_cache.GrowingLayer
    torch.testing.assert_close(grown.layers[0].keys, k)
    sliding = DynamicCache()
    sliding.layers.append(DynamicSlidingWindowLayer(sliding_window=3))
    sliding.update(k, -k, 0)
    assert type(kv_cache.to_growing(sliding).layers[0]) is DynamicSlidingWindowLayer
    legacy = ((k, -k),)
    assert kv_cache.to_growing(legacy) is legacy


def test_length_batches_with_a_padding_cap_close_early_and_keep_every_index():
    lengths = [99, 555, 101, 470, 306, 106, 297, 229, 114, 206, 187, 176, 169, 167, 129, 121]
    plain = batching.length_batches(lengths, 16)
    capped = batching.length_batches(lengths, 16, max_padding=1.25)
    assert len(plain) == 1 and sorted(i for b in capped for i in b) == list(range(16))
    for batch in capped:
        assert len(batch) * max(lengths[i] for i in batch) <= 1.25 * sum(lengths[i] for i in batch) or len(batch) == 1
    assert sum(len(b) * max(lengths[i] for i in b) for b in capped) < 0.5 * 16 * 555
    assert all(len(b) <= 4 for b in batching.length_batches(lengths, 4, max_padding=10))  # the row cap holds too


def _sliding_lm(family: str):
    """A tiny sliding-window model whose window (6) is far shorter than the test's prompts (~70 tokens)."""
    from tiny import tiny_tokenizer
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, MistralConfig, MistralForCausalLM

    from softeval.lm.models import BASE, LoadedModel

    tok = tiny_tokenizer()
    torch.manual_seed(0)
    shape = {"vocab_size": len(tok), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "sliding_window": 6,
             "initializer_range": 0.5, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    if family == "gemma3":  # sliding and full layers: a mask for each
        model = Gemma3ForCausalLM(Gemma3TextConfig(
            **shape, layer_types=["sliding_attention", "full_attention", "sliding_attention"]))
    else:  # every layer slides: one mask
        model = MistralForCausalLM(MistralConfig(**shape))
    return LoadedModel(model.eval().requires_grad_(False), tok, f"tiny-{family}", BASE, "test", pad_id=0, eos_ids=(2,))


def _first_logprobs(lm, seqs, soft, prefix_cache):
    """The first generated token's log-probabilities over the whole vocabulary, per sequence."""
    every = [list(range(lm.model.config.vocab_size))] * len(seqs)
    gen = generation.generate(lm, seqs, soft=soft, max_new_tokens=3, batch_size=3, prefix_cache=prefix_cache,
                              first_ids=every)
    return torch.tensor(gen.first_logprobs)


@pytest.mark.parametrize("family", ["gemma3", "mistral"])
@pytest.mark.parametrize("with_soft", [False, True])
def test_a_shared_prefix_on_a_sliding_window_model_gives_the_plain_layouts_results(family, with_soft):
    """The pads between prefix and suffix must not count against the window: masks from positions."""
    lm = _sliding_lm(family)
    seqs, soft = _seqs(lm), _soft(lm) if with_soft else None
    assert min(map(len, seqs)) > 10 * lm.model.config.sliding_window and len(set(map(len, seqs))) > 1
    assert kv_cache.position_masks_usable(lm)
    assert kv_cache.plan_prefix(lm, seqs, soft, True) is not None  # the prefix is shared, not declined
    plain = _first_logprobs(lm, seqs, soft, False)
    torch.testing.assert_close(_first_logprobs(lm, seqs, soft, True), plain, rtol=1e-5, atol=1e-4)
    kw = {"soft": soft, "max_new_tokens": 12, "batch_size": 3}
    assert (generation.generate(lm, seqs, prefix_cache=True, **kw).texts
            == generation.generate(lm, seqs, prefix_cache=False, **kw).texts)
    tok = lambda t: lm.tokenizer(t, add_special_tokens=False).input_ids
    options = [[tok(" yes"), tok(" no"), tok(" a b c")] for _ in seqs]
    torch.testing.assert_close(
        torch.tensor(loglik.option_logprobs(lm, seqs, options, soft=soft, batch_size=3, prefix_cache=True)),
        torch.tensor(loglik.option_logprobs(lm, seqs, options, soft=soft, batch_size=3, prefix_cache=False)),
        rtol=1e-5, atol=1e-4)


def test_position_masks_apply_the_window_in_positions_not_columns(monkeypatch):
    """The window matters on these prompts (masking without it moves the logits; the per-model probe
    then declines the shared prefix), and the masks measure it in positions: a row with pads between
    prefix and suffix sees the same keys as without pads."""
    lm, fresh = _sliding_lm("gemma3"), _sliding_lm("gemma3")
    seqs = _seqs(lm)
    plain = _first_logprobs(lm, seqs, None, False)
    assert kv_cache.position_masks_usable(lm)  # probed (and kept) before the rule is broken below
    full = kv_cache.position_masks

    def no_window(model, mask, positions):
        masks = full(model, mask, positions)
        return {"full_attention": masks["full_attention"], "sliding_attention": masks["full_attention"]}

    monkeypatch.setattr(kv_cache, "position_masks", no_window)
    assert (_first_logprobs(lm, seqs, None, True) - plain).abs().max() > 0.1
    assert not kv_cache.position_masks_usable(fresh) and kv_cache.plan_prefix(fresh, seqs, None, True) is None
    mask = torch.tensor([[1, 1, 0, 0, 1, 1], [1, 1, 1, 1, 1, 1]])
    positions = torch.tensor([[2, 3], [4, 5]])
    sliding = full(lm.model, mask, positions)["sliding_attention"][:, 0] == 0  # True where a query sees a key
    window = lm.model.config.sliding_window
    for row in range(2):
        key_pos = (mask[row].cumsum(-1) - 1).tolist()
        for q, p in enumerate(positions[row].tolist()):
            want = [bool(mask[row, k]) and 0 <= p - key_pos[k] < window for k in range(mask.shape[1])]
            assert sliding[row, q].tolist() == want


def test_first_token_logprobs_match_option_logprobs():
    """Option scores taken from the generation's first forward pass (``first_ids``) equal the separate
    scoring pass."""
    lm = tiny_lm()
    soft = SoftPrompt.initialise(lm, 3, "vocab", seed=0).weight
    prompts = [lm.tokenizer(t).input_ids for t in ("Q: 1?\nA:", "Q: longer question here?\nA:", "Q: x\nA:")]
    letters = [[lm.tokenizer(f" {c}", add_special_tokens=False).input_ids[-1:]] for c in "ABCD"]
    options = [[o[0] for o in letters]] * len(prompts)
    for s in (None, soft):
        first = [[o[0] for o in item] for item in options]
        seen = generation.generate(lm, prompts, soft=s, max_new_tokens=2, batch_size=2, first_ids=first).first_logprobs
        direct = loglik.option_logprobs(lm, prompts, options, soft=s, batch_size=2)
        assert len(seen) == 3 and all(len(seen[i]) == len(options[i]) for i in range(3))
        for i in range(3):
            torch.testing.assert_close(torch.tensor(seen[i]), torch.tensor(direct[i]), atol=1e-5, rtol=1e-5)
