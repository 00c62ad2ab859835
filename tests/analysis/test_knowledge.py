"""The knowledge side: cloze scores, the permutation (label-prior) check, paired tests between methods,
format-failure causes, and run folders written before any of them."""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
from pathlib import Path

import pytest
import torch
from runfactory import demo_runs, outcomes, write_run
from scipy.stats import binomtest
from tiny import tiny_lm

from softeval import tasks
from softeval.analysis.compare import compare_runs, load_runs, paired_method_tests
from softeval.analysis.paired import mcnemar_exact, paired_difference_interval, paired_test
from softeval.cli import analysis as cli_analysis
from softeval.diagnosis import CAUSES, failure_cause
from softeval.errors import UserError
from softeval.lm import batching, generation, loglik
from softeval.run.config import RunConfig
from softeval.run.pipeline import run_job
from softeval.run.scoring import permutations_for, score_output
from softeval.store import index
from softeval.store.format import INDEX_FILE
from softeval.tasks.base import (
    LETTERS,
    Example,
    Splits,
    Task,
    cloze_question,
    lenient_letter,
    match_exact,
    render_mc,
    strict_letter,
)

WORDS = ["red", "blue", "green", "violet", "amber", "teal", "indigo", "ochre", "mauve", "cyan", "olive", "navy"]


def mc_task(n_tune: int = 8, n_eval: int = 6, name: str = "toymc") -> Task:
    """Colour questions with 4 options of different lengths; the answer is the first option whose
    name has the question's length (so there is content to follow)."""
    def make(i: int, split: str) -> Example:
        options = tuple(WORDS[(i + k) % len(WORDS)] for k in range(4))
        gold = LETTERS[i % 4]
        return Example(id=f"{split}/{i}", fields={"question": f"Which colour is number {i}?",
                                                  "answer": options[i % 4]}, gold=gold, options=options)

    tune, test = [make(i, "tune") for i in range(n_tune)], [make(i, "test") for i in range(n_eval)]
    return Task(name=name, description="toy multiple choice", instruction="Answer with the letter.",
                render=lambda e: render_mc(e.fields["question"], e.options), target=lambda e: " " + e.gold,
                strict=strict_letter, lenient=lenient_letter, match=match_exact,
                load=lambda source="offline", **kw: Splits(list(tune), list(test), "synthetic", "tune", "test"),
                stop=("\n",), max_new_tokens=4, multiple_choice=True,
                cloze=lambda e: cloze_question(e.fields["question"]))


@pytest.fixture
def toymc(monkeypatch):
    task = mc_task()
    monkeypatch.setitem(tasks.TASKS, task.name, task)
    return task


def _config(out: Path, **kw) -> RunConfig:
    base = dict(model="tiny-0", task="toymc", methods=("zero-shot",), limit=6, eval_batch_size=4, steps=2,
                tokens=2, batch_size=2, curve_items=0, shots=2, out=str(out), device="cpu")
    return RunConfig(**{**base, **kw})


def _samples(out: Path, method: str = "zero-shot") -> list[dict]:
    path = next(out.rglob(f"{method}/seed0/samples.jsonl"))
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---- cloze ------------------------------------------------------------------------------------

def test_cloze_scores_equal_a_hand_computed_sum_raw_and_per_character(tmp_path, toymc):
    lm = tiny_lm(seed=5, init_range=0.5)
    (result,) = run_job(_config(tmp_path), lm=lm)
    assert {"cloze_accuracy", "cloze_accuracy_norm", "letter_loglik_accuracy"} <= set(result["metrics"])
    by_id = {e.id: e for e in toymc.load().eval}
    picks_differ = 0
    for sample in _samples(tmp_path):
        example = by_id[sample["id"]]
        context = lm.tokenizer(toymc.cloze(example)).input_ids  # BOS + the cloze prompt
        expected = []
        for option in example.options:
            cont = lm.tokenizer(" " + option, add_special_tokens=False).input_ids
            with torch.no_grad():
                logp = torch.log_softmax(lm.model(torch.tensor([context + cont])).logits[0].float(), -1)
            expected.append(sum(float(logp[len(context) - 1 + k, tok]) for k, tok in enumerate(cont)))
        assert sample["cloze_scores"] == pytest.approx(expected, abs=1e-4)
        raw = max(range(4), key=lambda j: expected[j])
        norm = max(range(4), key=lambda j: expected[j] / len(example.options[j]))
        assert sample["cloze_pred"] == LETTERS[raw] and sample["cloze_correct"] == (LETTERS[raw] == example.gold)
        assert sample["cloze_norm_pred"] == LETTERS[norm]
        picks_differ += raw != norm
    n = result["n"]
    assert result["metrics"]["cloze_accuracy"]["n"] == n and result["metrics"]["cloze_accuracy"]["ci_low"] is not None
    assert picks_differ >= 0  # the per-character pick may or may not differ on a random model


def test_cloze_few_shot_puts_solved_cloze_shots_first_without_the_letter_instruction(tmp_path, toymc):
    from softeval.run.prompting import Prompter

    lm = tiny_lm()
    splits = toymc.load()
    prompter = Prompter(lm, toymc, chat=False, shots=splits.tune[:2])
    text = prompter.cloze_text(splits.eval[0], "few-shot")
    first = splits.tune[0]
    assert text.startswith(f"Question: {first.fields['question']}\nAnswer: {first.fields['answer']}\n\n")
    assert text.endswith(toymc.cloze(splits.eval[0])) and "letter" not in text
    assert prompter.cloze_text(splits.eval[0], "soft-prompt") == toymc.cloze(splits.eval[0])


def test_options_are_encoded_jointly_with_the_context():
    from softeval.run.prompting import encode_pair

    class Merging:  # reads " B" as one token, as BPE tokenizers do
        def __call__(self, text, add_special_tokens=True):
            ids, i = [], 0
            while i < len(text):
                if text.startswith(" B", i):
                    ids.append(1000)
                    i += 2
                else:
                    ids.append(ord(text[i]))
                    i += 1
            return type("Enc", (), {"input_ids": ids})()

    # The context's trailing space moves to the continuation: " B" is one token, not " " then "B".
    ctx, cont = encode_pair(Merging(), "Answer: ", "B")
    assert ctx == [ord(c) for c in "Answer:"] and cont == [1000]
    ctx, cont = encode_pair(Merging(), "x", " yB")
    assert ctx == [ord("x")] and cont == [ord(" "), ord("y"), ord("B")]


def test_grouped_option_scoring_equals_one_sequence_per_option():
    lm = tiny_lm(seed=2, init_range=0.5)
    tok = lambda t, s=False: lm.tokenizer(t, add_special_tokens=s).input_ids
    contexts = [tok("Question: what colour?\nAnswer:", True), tok("Q: b\nAnswer:", True), tok("Q: longer one\nA:", True)]
    options = [[tok(" red"), tok(" violet"), tok(" a")], [tok(" blue sky"), tok(" no")], [tok(" x"), tok(" yz")]]
    grouped = loglik.grouped_option_logprobs(lm, contexts, options, batch_size=3)
    plain = loglik.option_logprobs(lm, contexts, options, batch_size=2, prefix_cache=False)
    torch.testing.assert_close(torch.tensor([x for r in grouped for x in r]),
                               torch.tensor([x for r in plain for x in r]), rtol=1e-5, atol=1e-4)


def test_grouped_option_scoring_with_options_of_very_different_lengths():
    # One batch's option rows split into groups of similar length, each with its own cache rows.
    lm = tiny_lm(seed=3, init_range=0.5)
    tok = lambda t, s=False: lm.tokenizer(t, add_special_tokens=s).input_ids
    contexts = [tok("Question: which?\nAnswer:", True), tok("Q: two\nAnswer:", True)]
    options = [[tok(" a"), tok(" " + "long option text " * 6), tok(" bc")],
               [tok(" " + "medium words " * 3), tok(" d"), tok(" " + "x y " * 12)]]
    assert len(batching.padding_groups([len(o) + 1 for opts in options for o in opts])) > 1
    grouped = loglik.grouped_option_logprobs(lm, contexts, options, batch_size=16)
    plain = loglik.option_logprobs(lm, contexts, options, batch_size=1, prefix_cache=False)
    torch.testing.assert_close(torch.tensor([x for r in grouped for x in r]),
                               torch.tensor([x for r in plain for x in r]), rtol=1e-5, atol=1e-4)


def test_options_side_by_side_equal_one_row_per_option_with_soft_prompt_and_shared_prefix(monkeypatch):
    # The block layout (all options of an item in one row after its cache) against one row per
    # option, each with its own copy of the cache: same scores, with a soft prompt in the shared
    # prefix, left pads in the context batch, and options from one to many tokens.
    lm = tiny_lm(seed=4, init_range=0.5)
    tok = lambda t, s=False: lm.tokenizer(t, add_special_tokens=s).input_ids
    head = tok("Shared instruction block. ", True)
    contexts = [head + tok("Question: which?\nAnswer:"), head + tok("Q: two words here\nAnswer:"),
                head + tok("Q\nA:")]
    options = [[tok(" a"), tok(" " + "long option text " * 5), tok(" bc")],
               [tok(" " + "medium words " * 3), tok(" d")], [tok(" x y"), tok(" z"), tok(" w"), tok(" v")]]
    soft = torch.randn(3, lm.model.config.hidden_size) * 0.3
    assert loglik.block_options_usable(lm)
    block = loglik.grouped_option_logprobs(lm, contexts, options, soft=soft, batch_size=16)
    monkeypatch.setattr(loglik, "BLOCK_OPTIONS", False)
    rows = loglik.grouped_option_logprobs(lm, contexts, options, soft=soft, batch_size=16)
    plain = loglik.option_logprobs(lm, contexts, options, soft=soft, batch_size=1, prefix_cache=False)
    flat = lambda x: torch.tensor([v for r in x for v in r])
    torch.testing.assert_close(flat(block), flat(rows), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(flat(block), flat(plain), rtol=1e-5, atol=1e-4)


def test_a_model_that_ignores_custom_masks_keeps_one_row_per_option():
    # An attention implementation that drops a 4D mask (as some kernels do) fails the probe, and
    # the scores still equal the plain path's.
    lm = tiny_lm(seed=5, init_range=0.5)
    inner = lm.model.forward

    def drops_4d_masks(*args, attention_mask=None, **kw):
        if attention_mask is not None and attention_mask.dim() == 4:
            attention_mask = None
        return inner(*args, attention_mask=attention_mask, **kw)

    lm.model.forward = drops_4d_masks
    assert not loglik.block_options_usable(lm)
    tok = lambda t, s=False: lm.tokenizer(t, add_special_tokens=s).input_ids
    contexts = [tok("Question: a?\nAnswer:", True), tok("Q: bb\nA:", True)]
    options = [[tok(" red"), tok(" green leaf")], [tok(" x"), tok(" yz w")]]
    grouped = loglik.grouped_option_logprobs(lm, contexts, options, batch_size=8)
    plain = loglik.option_logprobs(lm, contexts, options, batch_size=1, prefix_cache=False)
    torch.testing.assert_close(torch.tensor([x for r in grouped for x in r]),
                               torch.tensor([x for r in plain for x in r]), rtol=1e-5, atol=1e-4)


def test_padding_groups_bound_the_padding_and_keep_every_row():
    lengths = [1, 50, 2, 48, 3, 1, 25]
    groups = batching.padding_groups(lengths)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        assert len(g) == 1 or len(g) * max(lengths[i] for i in g) <= 1.25 * sum(lengths[i] for i in g)
    assert batching.padding_groups([4, 4, 4]) == [[0, 1, 2]]


def test_boolq_cloze_scores_yes_and_no():
    from softeval.tasks.boolq import TASK

    example = Example(id="x", fields={"passage": "p", "question": "Is it?"}, gold="yes")
    assert TASK.cloze_options(example) == (["no", "yes"], 1)
    assert TASK.cloze(example).endswith("Question: Is it?\nAnswer:")


# ---- permutations -----------------------------------------------------------------------------

def _fake_letter_scorer(follow_content: bool, answers: dict[str, str], lm):
    """An option scorer that reads the lettered prompt: it prefers the letter whose option is the
    right colour (content) or always D (a label prior). Cloze prompts (no lettered lines) get 0."""
    real = loglik.option_logprobs

    def scorer(model, contexts, options, **kw):
        out = []
        for ctx, opts in zip(contexts, options):
            text = lm.tokenizer.decode(ctx, skip_special_tokens=True)
            lines = dict(line.split(". ", 1) for line in text.splitlines() if line[:2] in {f"{x}." for x in "ABCD"})
            if not lines:
                out.append([0.0] * len(opts))
                continue
            question = re.search(r"Question: [^\n]*", text).group(0)
            right = answers[question]
            letters = [lm.tokenizer.decode(o).strip() for o in opts]
            out.append([0.0 if (lines[x] == right if follow_content else x == "D") else -5.0 for x in letters])
        return out

    return real, scorer


@pytest.mark.parametrize("follow_content", [True, False])
def test_permutation_consistency_exposes_a_letter_prior(tmp_path, toymc, monkeypatch, follow_content):
    lm = tiny_lm()
    answers = {f"Question: {e.fields['question']}": e.fields["answer"] for e in toymc.load().eval}
    _real, scorer = _fake_letter_scorer(follow_content, answers, lm)
    monkeypatch.setattr(loglik, "option_logprobs", scorer)
    (result,) = run_job(_config(tmp_path, permutations=3), lm=lm)
    consistency = result["metrics"]["permutation_consistency"]["value"]
    circular = result["metrics"]["circular_accuracy"]["value"]
    if follow_content:
        assert consistency == 1.0 and circular == 1.0
    else:  # "always D": the chosen content moves with the order
        assert consistency <= 0.2 and circular <= 0.2
    for sample in _samples(tmp_path):
        assert len(sample["permutation_picks"]) == 4  # the original order + 3 permutations


def test_permutations_are_seeded_distinct_and_never_the_original():
    orders = permutations_for(4, 5, "item-1")
    assert orders == permutations_for(4, 5, "item-1") and len(set(orders)) == 5
    assert (0, 1, 2, 3) not in orders
    assert permutations_for(2, 1, "x") == [(1, 0)]  # the one other order there is
    with pytest.raises(ValueError):  # more than exist: Job.prepare refuses --permutations first
        permutations_for(2, 2, "x")


def test_permutations_beyond_the_orders_that_exist_are_refused_before_the_model_runs(tmp_path, toymc):
    """--permutations 30 on 4 options used to run 23 orders while the config recorded 30."""
    n_options = {len(e.options) for e in toymc.load().eval}
    assert n_options == {4}
    with pytest.raises(UserError, match=r"^--permutations 24: item '.+' of toymc has 4 options, so only 23 other "
                                        r"orders; give --permutations 23 or less$"):
        run_job(_config(tmp_path, permutations=24), lm=tiny_lm())
    assert not any(tmp_path.iterdir())


def test_permutations_are_a_clear_error_below_zero():
    from softeval import cli

    assert cli.main(["eval", "--model", "tiny", "--task", "mmlu", "--permutations", "-1"]) == 2


# ---- paired tests -----------------------------------------------------------------------------

def test_mcnemar_p_equals_scipy_on_a_hand_made_table():
    # 40 items: 20 right under both, 3 only under A, 11 only under B, 6 under neither.
    ids = [f"i{k}" for k in range(40)]
    a = dict(zip(ids, [True] * 20 + [True] * 3 + [False] * 11 + [False] * 6))
    b = dict(zip(ids, [True] * 20 + [False] * 3 + [True] * 11 + [False] * 6))
    test = paired_test("zero-shot", "soft-prompt", a, b)
    assert (test.both, test.a_only, test.b_only, test.neither) == (20, 3, 11, 6)
    assert test.p_value == pytest.approx(binomtest(3, 14, 0.5).pvalue, rel=1e-12)
    assert test.difference == pytest.approx(0.2)
    assert test.ci_low < 0.2 < test.ci_high and -1 <= test.ci_low and test.ci_high <= 1
    assert mcnemar_exact(0, 0) == 1.0


def test_paired_interval_is_newcombes_and_excludes_zero_only_for_a_clear_difference():
    low, high = paired_difference_interval(10, 2, 2, 10)
    assert low < 0 < high and high == pytest.approx(-low)
    low, high = paired_difference_interval(30, 0, 25, 45)  # B right on 25 more items of 100
    assert low > 0


def test_compare_reports_paired_tests_without_pairs(tmp_path, capsys):
    demo_runs(tmp_path, n=40)
    runs, _ = load_runs(tmp_path)
    rows = paired_method_tests(runs)
    assert {(r.test.a, r.test.b) for r in rows} == {("zero-shot", "soft-prompt"), ("few-shot", "soft-prompt")}
    assert all(r.test.n == 40 for r in rows)
    parser = argparse.ArgumentParser()
    cli_analysis.register(parser.add_subparsers())
    args = parser.parse_args(["compare", str(tmp_path), "--json"])
    assert args.handler(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["paired_tests"]) == 8 and {"p_value", "ci_low", "difference"} <= set(data["paired_tests"][0])
    args = parser.parse_args(["compare", str(tmp_path)])
    assert args.handler(args) == 0
    assert "McNemar" in capsys.readouterr().out


# ---- format-failure causes --------------------------------------------------------------------

MMLU_EXAMPLE = Example(id="q", fields={"question": "What is the capital of France?"}, gold="B",
                       options=("Berlin", "Paris", "Rome", "Madrid"))


@pytest.mark.parametrize("output,hit,cause", [
    ("   ", False, "empty"),
    ("Well, let me think about this one carefully", True, "max_new_tokens"),
    ("The answer is B", False, "wrong_style"),
    ("Paris", False, "wrong_style"),
    ("I'm sorry, I cannot help with that.", False, "refusal_or_echo"),
    ("Question: What is the capital of France?", True, "refusal_or_echo"),
    ("What is the capital of France? Hmm", False, "refusal_or_echo"),
    ("Hmm.", False, "other"),
    (" B", False, None),
])
def test_every_failure_cause_comes_from_a_constructed_output(output, hit, cause):
    from softeval.tasks.mmlu import TASK

    sample = score_output(TASK, MMLU_EXAMPLE, output)
    prompt = TASK.instruction + "\n\n" + TASK.render(MMLU_EXAMPLE)
    assert failure_cause(sample, prompt, MMLU_EXAMPLE.options, True, hit) == cause


def test_a_cut_off_chain_of_thought_is_a_token_limit_not_a_style_failure():
    from softeval.tasks.gsm8k import TASK

    example = Example(id="g", fields={"question": "Ann has 3 apples and buys 4. How many?"}, gold="7")
    sample = score_output(TASK, example, "She starts with 3 apples, then buys 4 more, so")
    assert failure_cause(sample, "Question: ...", (), False, True) == "max_new_tokens"
    assert failure_cause(sample, "Question: ...", (), False, False) == "wrong_style"
    assert set(CAUSES) == {"empty", "max_new_tokens", "wrong_style", "refusal_or_echo", "other"}


def test_runs_count_failure_causes_and_record_truncation_per_sample(tmp_path, toymc):
    (result,) = run_job(_config(tmp_path), lm=tiny_lm())
    failures = result["format_failures"]
    assert set(failures["causes"]) == set(CAUSES)
    assert failures["failed"] == sum(failures["causes"].values()) == round(
        result["n"] * (1 - result["metrics"]["format_rate"]["value"]))
    samples = _samples(tmp_path)
    assert all(isinstance(s["hit_max_new_tokens"], bool) for s in samples)
    assert failures["hit_max_new_tokens"] == sum(s["hit_max_new_tokens"] for s in samples)
    assert all((s["failure"] is None) == s["format_ok"] for s in samples)


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


# ---- old run folders --------------------------------------------------------------------------

def _legacy_runs(out: Path, n: int = 30) -> None:
    for i in range(3):
        for method, rate in (("zero-shot", 0.3), ("soft-prompt", 0.5)):
            write_run(out, f"base-{i}", "mmlu", method, outcomes(n, rate, offset=i),
                      loglik_correct=outcomes(n, 0.4 + 0.1 * i), legacy=True)
        write_run(out, f"post-{i}", "mmlu", "zero-shot", outcomes(n, 0.3 + 0.2 * i), model_kind="post-trained",
                  loglik_correct=outcomes(n, 0.5), legacy=True)


def test_old_run_folders_load_in_runs_compare_and_report(tmp_path, capsys):
    _legacy_runs(tmp_path)
    runs, skipped = load_runs(tmp_path)
    assert not skipped and all(r.metric("letter_loglik_accuracy") for r in runs)
    listed = index.list_runs(tmp_path)
    assert all(r["letter_loglik_accuracy"] is not None and r["cloze_accuracy"] is None for r in listed)
    pairs = [(f"base-{i}", f"post-{i}") for i in range(3)]
    for name in ("letter_loglik_accuracy", "loglik_accuracy"):  # the old name still works
        result = compare_runs(runs, pairs, metric=name, n_boot=50)
        assert result.metric == "letter_loglik_accuracy" and result.results
    assert paired_method_tests(runs)
    from softeval.analysis.report import build_report

    page = build_report(tmp_path, tmp_path / "r.html", pairs, n_boot=50).read_text()
    assert "Knowledge" in page and "letter_loglik_accuracy" in page


def test_an_old_index_gets_the_new_metric_columns(tmp_path):
    _legacy_runs(tmp_path)
    conn = sqlite3.connect(tmp_path / INDEX_FILE)
    conn.execute("CREATE TABLE runs (path TEXT PRIMARY KEY, model TEXT NOT NULL, model_kind TEXT, task TEXT NOT NULL,"
                 " method TEXT NOT NULL, seed INTEGER NOT NULL, n INTEGER, accuracy REAL, format_rate REAL,"
                 " knowledge_accuracy REAL, lenient_accuracy REAL, loglik_accuracy REAL, metrics_json TEXT NOT NULL,"
                 " top_answer TEXT, finished_at TEXT, indexed_at TEXT NOT NULL)")
    conn.execute("INSERT INTO runs VALUES ('base-0/mmlu/zero-shot/seed0', 'base-0', 'base', 'mmlu', 'zero-shot', 0,"
                 " 30, 0.3, 1, 0.3, 0.3, 0.4, ?, NULL, NULL, 'x')",
                 (json.dumps({"loglik_accuracy": {"value": 0.4, "ci_low": 0.2, "ci_high": 0.6, "n": 30}}),))
    conn.commit()
    conn.close()
    (row,) = index.list_runs(tmp_path)
    assert row["letter_loglik_accuracy"] == 0.4 and row["metrics"]["letter_loglik_accuracy"]["value"] == 0.4
    index.record_run(tmp_path, tmp_path / "base-1/mmlu/zero-shot/seed0")  # writes under today's columns
    assert len(index.list_runs(tmp_path)) == 2


def test_report_has_the_knowledge_panel_with_failure_bars(tmp_path):
    from softeval.analysis.report import build_report

    pairs = demo_runs(tmp_path, n=40)
    page = build_report(tmp_path, tmp_path / "r.html", pairs, n_boot=50).read_text()
    assert "Knowledge: format-free references" in page
    assert "format failure causes on mmlu" in page and "cloze reference and strict accuracy on mmlu" in page
    assert "p=" in page  # the paired tests
