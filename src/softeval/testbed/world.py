"""The synthetic world of `softeval testbed`: made-up people with a birth city, an employer and a birth
year, rendered into biographies by paraphrase templates, and questions about them in one strict format.

Everything is drawn from ``random.Random(seed)``, so a world seed names one world exactly. People are split
once: the *scored* half (the benchmark's test items) and the *unscored* half (the tuning split of the
soft prompt and the post-training data); the two never share a person. Every scored fact (person,
attribute, value) is recorded, so what a model was trained on is known by construction.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

ATTRIBUTES = ("city", "company", "year")
# Paraphrase templates per attribute; the value always ends the sentence, so its first part is a cloze prefix.
TEMPLATES = {
    "city": ("{name} was born in {value}.", "The birthplace of {name} is {value}.",
             "{name} came into the world in {value}.", "The home town of {name} is {value}.",
             "As a child {name} lived in {value}."),
    "company": ("{name} works for {value}.", "The employer of {name} is {value}.",
                "{name} has a job at {value}.", "Every day {name} goes to work at {value}.",
                "The company of {name} is {value}."),
    "year": ("{name} was born in the year {value}.", "The birth year of {name} is {value}.",
             "{name} came into the world in the year {value}.", "The year {name} was born is {value}.",
             "The records give the birth year of {name} as {value}."),
}
QUESTIONS = {"city": "Where was {name} born?", "company": "Which company does {name} work for?",
             "year": "In which year was {name} born?"}
QA_PROMPT = "Question: {question}\nAnswer:"  # the benchmark's format: the value alone after "Answer:"
YEARS = tuple(str(y) for y in range(1940, 2000))
_CONSONANTS, _VOWELS = "bdfgklmnprstvz", "aeiou"


@dataclass(frozen=True)
class Person:
    name: str
    city: str
    company: str
    year: str

    def value(self, attribute: str) -> str:
        return getattr(self, attribute)


@dataclass(frozen=True)
class Fact:
    person: str
    attribute: str
    value: str

    @property
    def id(self) -> str:
        return f"{self.person.replace(' ', '_')}/{self.attribute}"

    @property
    def question(self) -> str:
        return QUESTIONS[self.attribute].format(name=self.person)


@dataclass(frozen=True)
class World:
    seed: int
    scored: tuple[Person, ...]
    unscored: tuple[Person, ...]
    cities: tuple[str, ...]
    companies: tuple[str, ...]

    @property
    def people(self) -> tuple[Person, ...]:
        return self.scored + self.unscored

    def values(self, attribute: str) -> tuple[str, ...]:
        return {"city": self.cities, "company": self.companies, "year": YEARS}[attribute]

    def facts(self, people: tuple[Person, ...] | None = None) -> list[Fact]:
        """Every (person, attribute, value) of ``people`` (default: the scored people): the ground truth."""
        return [Fact(p.name, a, p.value(a)) for p in (self.scored if people is None else people) for a in ATTRIBUTES]

    def chance(self) -> float:
        """Accuracy of the best constant answer per attribute on the scored facts (the majority value)."""
        facts = self.facts()
        best = 0
        for attribute in ATTRIBUTES:
            counts: dict[str, int] = {}
            for f in facts:
                if f.attribute == attribute:
                    counts[f.value] = counts.get(f.value, 0) + 1
            best += max(counts.values())
        return best / len(facts)


def make_world(seed: int, n_people: int = 200, n_cities: int = 30, n_companies: int = 30,
               scored_share: float = 0.5) -> World:
    """A world of ``n_people`` made-up people (``scored_share`` of them scored), drawn from ``seed``."""
    if n_people < 4:
        raise ValueError("a world needs at least 4 people")
    rng = random.Random(seed)
    words: set[str] = set()

    def word(syllables: int) -> str:
        while True:
            w = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables)).capitalize()
            if w not in words:
                words.add(w)
                return w

    cities = tuple(word(3) for _ in range(n_cities))
    companies = tuple(word(3) + "corp" for _ in range(n_companies))
    people = [Person(f"{word(2)} {word(2)}", rng.choice(cities), rng.choice(companies), rng.choice(YEARS))
              for _ in range(n_people)]
    n_scored = min(n_people - 2, max(2, round(n_people * scored_share)))
    return World(seed, tuple(people[:n_scored]), tuple(people[n_scored:]), cities, companies)


def biography(person: Person, rng: random.Random, n_templates: int) -> str:
    """One biography: a sentence per attribute, each from one of the first ``n_templates`` templates,
    in a shuffled order."""
    sentences = [rng.choice(TEMPLATES[a][:n_templates]).format(name=person.name, value=person.value(a))
                 for a in ATTRIBUTES]
    rng.shuffle(sentences)
    return " ".join(sentences)


def qa_text(fact: Fact) -> str:
    """A question and its answer in the benchmark's format, as post-training and format exposure use it."""
    return QA_PROMPT.format(question=fact.question) + " " + fact.value


def cloze_prefix(fact: Fact) -> str:
    """The first template of the fact's attribute up to the value: what the cloze score continues."""
    return TEMPLATES[fact.attribute][0].split("{value}")[0].format(name=fact.person).rstrip()
