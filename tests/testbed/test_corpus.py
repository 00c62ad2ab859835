"""The testbed's texts and tokenizer: what each recipe's corpus holds is what its ground truth says."""

from dataclasses import replace

import pytest

from softeval.testbed.corpus import post_training_documents, pretraining_documents, seen_scored, train_tokenizer
from softeval.testbed.recipes import CONTROLS, FULL, QUICK, Recipe, recipes
from softeval.testbed.world import ATTRIBUTES, make_world, qa_text

WORLD = make_world(3, n_people=16)


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(WORLD)


def test_tokenizer_decodes_exactly_and_every_value_is_one_token(tokenizer):
    for f in WORLD.facts(WORLD.people):
        text = qa_text(f)
        ids = tokenizer(text).input_ids
        assert ids[0] == tokenizer.bos_token_id and tokenizer.unk_token_id not in ids
        assert tokenizer.decode(ids, skip_special_tokens=True) == text
    for attribute in ATTRIBUTES:
        for value in WORLD.values(attribute):
            assert tokenizer.convert_tokens_to_ids(" " + value) != tokenizer.unk_token_id


def test_corpus_holds_exactly_the_seen_scored_people(tokenizer):
    recipe = Recipe("half", 0.5, 3, 5, 0.3)
    docs = pretraining_documents(WORLD, recipe, 0)
    text = "\n".join(docs)
    seen = {p.name for p in seen_scored(WORLD, recipe)}
    assert len(seen) == round(len(WORLD.scored) * 0.5)
    for p in WORLD.scored:
        assert (p.name in text) == (p.name in seen)
    for doc in docs:
        assert tokenizer.unk_token_id not in tokenizer(doc).input_ids
    qa = [d for d in docs if d.startswith("Question:")]
    assert len(qa) == round((len(docs) - len(qa)) * 0.3)
    assert all(not any(p.name in d for p in WORLD.scored) for d in qa)  # format exposure: unscored people only


def test_the_never_saw_control_corpus_and_post_training_hold_no_scored_person():
    never = next(r for r in FULL if r.control == "never-saw")
    texts = pretraining_documents(WORLD, never, 0) + post_training_documents(WORLD)
    assert not any(p.name in t for t in texts for p in WORLD.scored)


def test_recipes_cover_both_axes_and_both_controls():
    assert len(FULL) >= 8 and {r.control for r in FULL} >= set(CONTROLS) and {r.control for r in QUICK} >= set(CONTROLS)
    assert len({r.name for r in FULL}) == len(FULL)
    assert len({r.qa_share for r in FULL}) >= 3 and len({r.scored_share for r in FULL}) >= 4
    assert {r.templates for r in FULL} >= {1, 5} and len({(r.hidden, r.layers) for r in FULL}) >= 2
    assert [r.exposures for r in recipes(False, 0.5)] == [max(1, round(r.exposures / 2)) for r in FULL]
    assert recipes(True) == QUICK and replace(QUICK[0]) == QUICK[0]
