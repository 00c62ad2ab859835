"""A built-in task's definition is numbered (``Task.revision``, part of a run's identity from 2 on, so that a
finished run of an older definition is never reused). This test holds the digest of each task's code as its
revision was recorded, and fails when the code changes unseen: a change that can change a number (prompt, target,
stops, token limit, extractors, matcher, data selection) raises the task's ``revision``; one that cannot (a
rename, a refactoring) keeps it. Either way, record the digest the failure prints.

The digest is of the code's syntax tree, not its text: comments, docstrings, blank lines and line numbers do
not move it, so only a change to what the code does asks for a decision."""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import inspect
import re
import sys

import pytest

from softeval.tasks import TASKS
from softeval.tasks.base import Task

# name: (revision, digest of its code and settings as that revision was recorded; the digests were recomputed once,
# the code unchanged, when they moved from the source text to the syntax tree; recomputed again when Task gained the
# prompt-variant fields, instruction_shown, labels and prompt_format, whose defaults render and score as before)
# 2026-12-07 (issue 69): every digest moved with the imports of softeval.protocol, renamed softeval.constants, and
# the task registry; no task's code or settings changed, so no revision.
RECORDED = {
    "arc_challenge": (1, '420fa98355bc82aa'),
    "arc_easy": (1, '61e8081fbae6f719'),
    "belebele": (1, '1ef219262077bbec'),
    "boolq": (1, 'ecd90e0586f98bda'),
    "gsm8k": (4, '7642b079f134c580'),
    "hellaswag": (1, '30b6b34ce63bde00'),
    "math500": (1, '10ed9e00b42eac4d'),  # mathcheck's size bound split into functions, the same bound
    "mmlu": (1, 'c975ee8c52ceb44d'),
    "squad": (1, '144a5730234bed2a'),
    "triviaqa": (1, '36f300b1dc79545f'),
}

CALLABLES = ("render", "target", "strict", "lenient", "match", "load", "cloze", "cloze_choices", "contexts",
             "answer_end")
SETTINGS = ("stop", "max_new_tokens", "instruction", "cue", "multiple_choice", "description")
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def code_tree(source: str) -> ast.Module:
    """``source`` parsed, its docstrings removed (a body that was only a docstring becomes ``pass``)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, _DOCUMENTED) and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str):
            node.body = node.body[1:] or [ast.Pass()]
    return tree


def dump(node) -> str:
    """``ast.dump`` without attributes (line and column numbers), and without the fields that are None or empty,
    so that Python versions that add an empty field (3.12's ``type_params``) or leave them out of ``ast.dump``
    (3.13) dump one tree alike."""
    if isinstance(node, ast.AST):
        fields = ((name, dump(getattr(node, name, None))) for name in node._fields)
        shown = [f"{name}={value}" for name, value in fields if value not in ("None", "[]")]
        return f"{type(node).__name__}({', '.join(shown)})"
    if isinstance(node, list):
        return f"[{', '.join(dump(item) for item in node)}]"
    return repr(node)


def source_digest(source: str) -> str:
    """The sha256 of a module's code: its syntax tree without docstrings, line numbers or comments."""
    return hashlib.sha256(dump(code_tree(source)).encode()).hexdigest()


def tasks_modules_named(tree: ast.Module) -> set[str]:
    """The modules of softeval.tasks the code names: imported (lazily too) or named in a string (mathnorm runs
    ``"softeval.tasks.mathcheck:verified"`` in a helper process). Comments and docstrings name none."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "softeval.tasks":
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= set(re.findall(r"^softeval\.tasks\.(\w+)", node.module))
        elif isinstance(node, ast.Import):
            names |= {m for alias in node.names for m in re.findall(r"^softeval\.tasks\.(\w+)", alias.name)}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names |= set(re.findall(r"softeval\.tasks\.(\w+)", node.value))
    return {n for n in names if importlib.util.find_spec(f"softeval.tasks.{n}") is not None}


def reached_modules(start) -> list:
    """``start`` and every module of softeval.tasks their code names (tasks_modules_named), and so on."""
    seen: dict = {}
    todo = list(start)
    while todo:
        module = todo.pop()
        if module.__name__ in seen:
            continue
        seen[module.__name__] = module
        todo += [importlib.import_module(f"softeval.tasks.{n}")
                 for n in sorted(tasks_modules_named(code_tree(inspect.getsource(module))))]
    return sorted(seen.values(), key=lambda m: m.__name__)


def task_modules(task: Task) -> set:
    """The modules the task's functions come from, and the one that defines it (its loader's settings, written
    there, live in a closure of base's ``source_loader``)."""
    modules = {inspect.getmodule(fn) for fn in (getattr(task, name) for name in CALLABLES) if fn is not None}
    return modules | {m for name, m in list(sys.modules.items()) if name.startswith("softeval.tasks.")
                      and any(value is task for value in vars(m).values())}


def code_digest(task: Task) -> str:
    """A sha256 over the code (source_digest) of the modules the task's functions come from (its own module,
    base's helpers), the modules of softeval.tasks those name (reached_modules), and its settings."""
    digest = hashlib.sha256()
    for module in reached_modules(task_modules(task)):
        digest.update(f"{module.__name__}\0{source_digest(inspect.getsource(module))}\0".encode())
    digest.update(repr([getattr(task, name) for name in SETTINGS]).encode())
    return digest.hexdigest()[:16]


def test_every_built_in_task_code_change_was_seen_and_its_revision_decided():
    now = {name: (task.revision, code_digest(task)) for name, task in sorted(TASKS.items())}
    changed = {name: now[name] for name in now if RECORDED.get(name) != now[name]}
    assert not changed, (
        "a built-in task's code changed: raise its Task.revision if a number can change, then record "
        f"these in RECORDED: {changed}")


def test_revisions_start_at_1():
    assert all(isinstance(t.revision, int) and t.revision >= 1 for t in TASKS.values())


def test_a_task_s_digest_covers_the_modules_its_functions_reach():
    names = {m.__name__ for m in reached_modules(task_modules(TASKS["math500"]))}
    assert {"softeval.tasks.math500", "softeval.tasks.mathnorm", "softeval.tasks.mathcheck", "softeval.tasks.base",
            "softeval.tasks.data"} <= names
    squad = {m.__name__ for m in reached_modules(task_modules(TASKS["squad"]))}
    assert {"softeval.tasks.squad", "softeval.tasks.qa"} <= squad and "softeval.tasks.mathnorm" not in squad


CODE = '''"""A module."""
import re

LIMIT = 30  # the token limit


def strict(output):
    """The answer, if the format was followed."""
    return re.match(r"#### (\\d+)", output[:LIMIT])


class Reader:
    """Only a docstring."""
'''


@pytest.mark.parametrize("edited", [
    CODE.replace("# the token limit", "# a comment changed"),
    CODE.replace("LIMIT = 30  # the token limit", "# a new comment line\nLIMIT = 30"),
    CODE.replace("The answer, if the format was followed.", "Another docstring."),
    CODE.replace('    """The answer, if the format was followed."""\n', ""),
    CODE.replace('"""A module."""\n', '"""A module,\n\nits docstring longer."""\n\n\n'),
    CODE.replace("Only a docstring.", "Still only a docstring."),
], ids=["comment", "comment-line", "docstring", "docstring-removed", "module-docstring", "class-docstring"])
def test_comments_docstrings_and_line_numbers_leave_the_digest(edited):
    assert edited != CODE and source_digest(edited) == source_digest(CODE)


@pytest.mark.parametrize("edited", [
    CODE.replace("LIMIT = 30", "LIMIT = 31"),
    CODE.replace("#### (\\d+)", "#### (\\d*)"),
    CODE.replace("output[:LIMIT]", "output[LIMIT:]"),
    CODE.replace('    """Only a docstring."""', "    limit = 1"),
], ids=["constant", "regex", "slice", "class-body"])
def test_a_changed_constant_or_statement_moves_the_digest(edited):
    assert edited != CODE and source_digest(edited) != source_digest(CODE)


def test_a_module_named_only_in_a_comment_or_docstring_is_not_reached():
    named = tasks_modules_named(code_tree(
        '"""Uses softeval.tasks.mathnorm."""\n# softeval.tasks.qa\nfrom softeval.tasks.data import x\n'
        'from softeval.tasks import base\nRUN = "softeval.tasks.mathcheck:verified"\n'))
    assert named == {"data", "base", "mathcheck"}


def test_a_real_module_without_its_comments_and_with_other_docstrings_has_the_same_digest():
    import io
    import tokenize

    for module in reached_modules(set().union(*(task_modules(task) for task in TASKS.values()))):
        source = inspect.getsource(module)
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type != tokenize.COMMENT]
        bare = tokenize.untokenize(tokens)
        for node in ast.walk(ast.parse(bare)):
            if isinstance(node, _DOCUMENTED) and ast.get_docstring(node, clean=False):
                bare = bare.replace(ast.get_docstring(node, clean=False), "another docstring", 1)
        assert bare != source and source_digest(bare) == source_digest(source), module.__name__
