"""Texts of the testbed: each recipe's pre-training corpus, the post-training QA, and the word-level
tokenizer every model of one world shares (so that no recipe differs from another by its vocabulary)."""

from __future__ import annotations

import random

from softeval.testbed.recipes import Recipe
from softeval.testbed.world import ATTRIBUTES, TEMPLATES, World, biography, qa_text

BOS, EOS, PAD, UNK = "<bos>", "<eos>", "<pad>", "<unk>"
# A piece is a word with its leading space, one punctuation mark, or a newline: decoding joins the pieces.
PIECES = r" ?[A-Za-z0-9]+|[^\sA-Za-z0-9]|\n| "


def seen_scored(world: World, recipe: Recipe) -> tuple:
    """The scored people whose biographies the recipe's corpus holds (the first share of them)."""
    return world.scored[:round(len(world.scored) * recipe.scored_share)]


def pretraining_documents(world: World, recipe: Recipe, seed: int) -> list[str]:
    """The recipe's corpus, shuffled: ``exposures`` biographies of every unscored person and of the seen
    scored people, plus ``qa_share`` QA documents per biography (unscored people only)."""
    rng = random.Random(f"{world.seed}/{recipe.name}/{seed}")
    people = list(world.unscored) + list(seen_scored(world, recipe))
    docs = [biography(p, rng, recipe.templates) for p in people for _ in range(recipe.exposures)]
    qa_facts = world.facts(world.unscored)
    docs += [qa_text(rng.choice(qa_facts)) for _ in range(round(len(docs) * recipe.qa_share))]
    rng.shuffle(docs)
    return docs


def post_training_documents(world: World) -> list[str]:
    """QA in the benchmark's format over every unscored fact: the one post-training recipe."""
    return [qa_text(f) for f in world.facts(world.unscored)]


def vocabulary_text(world: World) -> list[str]:
    """Every word the world can write (all templates, questions, values): the tokenizer's training text."""
    lines = [qa_text(f) for f in world.facts(world.people)]
    for p in world.people:
        for a in ATTRIBUTES:
            sentences = [t.format(name=p.name, value=p.value(a)) for t in TEMPLATES[a]]
            lines += sentences + [" " + s for s in sentences]  # a biography's later sentences follow a space
    lines += [" " + v for a in ATTRIBUTES for v in world.values(a)]
    return lines


def train_tokenizer(world: World):
    """A word-level tokenizer (the ``tokenizers`` library) over the world's words, as a transformers
    fast tokenizer that adds <bos> and decodes exactly."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(PIECES), behavior="isolated")
    core.decoder = decoders.Fuse()
    trainer = trainers.WordLevelTrainer(special_tokens=[PAD, BOS, EOS, UNK], min_frequency=1)
    core.train_from_iterator(vocabulary_text(world) + ["\n"], trainer=trainer)
    core.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, 1)])
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                   unk_token=UNK)
