"""The testbed's world generator: seeded, disjoint splits, every scored fact's ground truth recorded."""

import random
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from softeval.testbed.build import ANSWER_REGEX
from softeval.testbed.world import ATTRIBUTES, QA_PROMPT, TEMPLATES, biography, cloze_prefix, make_world, qa_text

worlds = st.builds(make_world, seed=st.integers(0, 10_000), n_people=st.integers(4, 80),
                   n_cities=st.integers(2, 12), n_companies=st.integers(2, 12),
                   scored_share=st.floats(0.1, 0.9))


@settings(max_examples=40, deadline=None)
@given(worlds)
def test_scored_and_unscored_people_never_overlap_and_names_are_unique(world):
    scored, unscored = {p.name for p in world.scored}, {p.name for p in world.unscored}
    assert scored and unscored and not scored & unscored
    assert len(scored) + len(unscored) == len(world.people)  # no name twice
    words = [w for p in world.people for w in p.name.split()] + list(world.cities) + list(world.companies)
    assert len(words) == len(set(words))


@settings(max_examples=40, deadline=None)
@given(worlds)
def test_every_scored_fact_is_recorded_with_its_ground_truth(world):
    facts = world.facts()
    assert len(facts) == len(world.scored) * len(ATTRIBUTES)
    assert len({f.id for f in facts}) == len(facts)
    by_name = {p.name: p for p in world.scored}
    for f in facts:
        assert f.value == by_name[f.person].value(f.attribute)
        assert f.value in world.values(f.attribute)
    assert not {f.person for f in facts} & {p.name for p in world.unscored}
    assert 0 < world.chance() <= 1


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_a_world_seed_names_one_world(seed):
    assert make_world(seed, n_people=20) == make_world(seed, n_people=20)


def test_different_seeds_make_different_worlds():
    assert make_world(0, n_people=20).people != make_world(1, n_people=20).people


@settings(max_examples=40, deadline=None)
@given(worlds, st.integers(0, 1000), st.integers(1, 5))
def test_a_biography_states_each_attribute_once_in_the_allowed_templates(world, seed, n_templates):
    person = world.people[0]
    text = biography(person, random.Random(seed), n_templates)
    allowed = {t.format(name=person.name, value=person.value(a))
               for a in ATTRIBUTES for t in TEMPLATES[a][:n_templates]}
    sentences = re.findall(r"[^.]*\.", text)
    assert len(sentences) == len(ATTRIBUTES)
    assert {s.strip() for s in sentences} <= allowed


@settings(max_examples=40, deadline=None)
@given(worlds)
def test_qa_text_answers_in_the_strict_format_and_the_cloze_prefix_leads_to_the_value(world):
    for f in world.facts()[:6]:
        prompt = QA_PROMPT.format(question=f.question)
        text = qa_text(f)
        assert text.startswith(prompt)
        answer = text[len(prompt):]
        match = re.search(ANSWER_REGEX, answer)
        assert match and match.group(1) == f.value
        assert TEMPLATES[f.attribute][0].format(name=f.person, value=f.value).startswith(cloze_prefix(f) + " ")
