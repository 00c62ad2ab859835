"""The method registry (softeval.methods): the built-ins' specs and order, what a spec may say, the options each
method reads (and so its run identity), the verdicts' pairs from the roles, and that no module outside the registry
names a method (issue 61: every other layer asks the registry)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from softeval import methods
from softeval.errors import UserError
from softeval.methods import BASELINE, MethodSpec
from softeval.methods.part import ADAPTER, INPUT_PREFIX, LAYER_PREFIX
from softeval.store.identity import identity_of, reads

BUILT_IN = ("zero-shot", "few-shot", "soft-prompt", "lora", "prefix-tuning")
SRC = Path(methods.__file__).resolve().parents[1]


def test_the_built_ins_in_table_order_with_their_kinds_and_roles():
    assert methods.names()[:5] == BUILT_IN
    assert methods.default_names() == ("zero-shot", "few-shot", "soft-prompt")
    assert methods.tuned_names() == ("soft-prompt", "lora", "prefix-tuning")
    assert methods.untuned_names() == ("zero-shot", "few-shot")
    assert [methods.maker_of(m) and methods.maker_of(m).enters for m in BUILT_IN] == [None, None, INPUT_PREFIX,
                                                                                        ADAPTER, LAYER_PREFIX]
    assert [methods.spec_of(m).shots for m in BUILT_IN] == [False, True, False, False, False]
    assert methods.pairs() == (("zero-shot", "soft-prompt"), ("few-shot", "soft-prompt"),
                               ("prefix-tuning", "soft-prompt"), ("zero-shot", "few-shot"),
                               ("zero-shot", "prefix-tuning"))
    assert methods.order(["lora", "x-later", "zero-shot", "few-shot"]) == ["zero-shot", "few-shot", "lora", "x-later"]
    assert methods.colour_of("not-registered") == "#444444" and methods.label_of("not-registered") == "not-registered"


def test_an_unknown_method_is_one_line_naming_those_there_are():
    with pytest.raises(UserError, match=r"^unknown method 'zero_shot': use zero-shot, few-shot, soft-prompt, lora, "
                                        "prefix-tuning"):
        methods.spec_of("zero_shot")


@pytest.mark.parametrize("change, message", [
    ({"reads": ("tokens",)}, r"reads \['tokens'\], which are not options only some methods read"),
    ({"role": "judge"}, "role must be one of"),
    ({"part": "softeval.run.parts:LORA"}, "name the folder a finished run keeps it in"),
    ({"part": "not a maker"}, "part must name its maker as 'module:attr'"),
    ({"name": "../up"}, "a run folder and `--method a,b` hold it"),
    ({"name": "a,b"}, "a run folder and `--method a,b` hold it"),
    ({"name": ""}, "a run folder and `--method a,b` hold it"),
])
def test_a_spec_that_says_what_cannot_hold_is_refused_when_registered(change, message):
    spec = MethodSpec(**{"name": "bad", "label": "bad", "colour": "#000000", "who": "it", "role": BASELINE, **change})
    with pytest.raises(ValueError, match=message):
        methods.register(spec)
    assert not methods.known("bad")


def test_a_name_is_registered_once_unless_replaced():
    spec = MethodSpec(name="twice", label="twice", colour="#000000", who="it", role=BASELINE)
    try:
        methods.register(spec)
        methods.register(spec)  # the same spec again: a no-op
        with pytest.raises(ValueError, match="registered already"):
            methods.register(MethodSpec(name="twice", label="other", colour="#000000", who="it", role=BASELINE))
    finally:
        methods.unregister("twice")


def test_each_method_reads_the_options_its_spec_names_and_every_other():
    options = {"method": None, "model": "m", "task": "t", "tokens": 10, "seed": 3, "shots": 5, "steps": 80,
               "lr": 0.03, "init": "vocab", "lora_rank": 8, "lora_lr": 3e-4, "eval_batch_size": 16}
    read = {m: set(identity_of({**options, "method": m})) - {"method"} for m in BUILT_IN}
    common = {"model", "task", "tokens", "eval_batch_size"}
    assert read["zero-shot"] == common
    assert read["few-shot"] == common | {"seed", "shots"}
    assert read["soft-prompt"] == common | {"seed", "steps", "lr", "init"}
    assert read["lora"] == common | {"seed", "steps", "lora_rank", "lora_lr"}
    assert read["prefix-tuning"] == common | {"seed", "steps", "lr"}  # not --init: it starts from activations
    assert reads("not-registered", "shots")  # a method not registered here keeps its whole identity


def _method_literals(path: Path) -> int:
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return sum(1 for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value in BUILT_IN
               and id(node) not in docs)


def test_no_module_outside_the_registry_names_a_method():
    """Method names as string constants (docstrings aside) only in softeval/methods/; elsewhere the two keys of the
    LoRA settings in the records a lora run writes (results.json's tuning, the adapter's notes), which name the
    adapter's settings, not a method."""
    found = {str(p.relative_to(SRC)): n for p in sorted(SRC.rglob("*.py"))
             if not p.relative_to(SRC).parts[0] == "methods" and (n := _method_literals(p))}
    assert found == {"lm/lora.py": 2}


PART_CLASSES = {"SoftPrompt", "LoraAdapter", "PrefixPart", "SoftPromptMaker", "LoraMaker", "PrefixMaker"}


def _kind_checks(path: Path) -> list[str]:
    """isinstance on a trained part's class, and reads of a method's kind of part (the removed ``trains``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
            names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
            found += [f"isinstance {name}" for name in names & PART_CLASSES]
        kind_call = isinstance(node, ast.Call) and getattr(node.func, "id", None) == "training"
        kind_name = isinstance(node, ast.Attribute) and node.attr == "trains" or getattr(node, "id", "") == "TRAINS"
        if kind_call or kind_name:
            found.append(f"line {node.lineno}")
    return found


def test_no_module_outside_methods_asks_what_kind_of_part_a_method_trains():
    """The tuning loop, the pipeline, validation, sweeps, the CLI and the engines read a part through its interface
    (methods/part.py) only: no isinstance on a part, no kind of part outside softeval/methods/."""
    found = {str(p.relative_to(SRC)): k for p in sorted(SRC.rglob("*.py"))
             if p.relative_to(SRC).parts[0] != "methods" and (k := _kind_checks(p))}
    assert found == {}


def test_every_tuned_method_s_part_is_a_maker_of_trained_parts():
    for name in methods.tuned_names():
        maker = methods.maker_of(name)
        assert {"what", "enters", "warm_starts"} <= set(dir(maker)) and callable(maker.attached), name
