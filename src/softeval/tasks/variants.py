"""Prompt variants: a task's prompt written in another format that asks the same thing.

A benchmark score should not hang on one arbitrary wording of the prompt, yet scores move by many points between
formats that mean the same (FormatSpread: Sclar et al., 2023; Mizrahi et al., 2024). A run's ``--prompt-variant N``
scores the task under format N of a small grammar (``PromptFormat``):

- ``names``: the field descriptors as the task writes them ("Question:") or their other names (``SHORT``: "Q:",
  "A:" for the question and the answer, "Topic:" for "Subject:", ...);
- ``casing``: the descriptors as written, in UPPER case, or in lower case;
- ``separator``: between a descriptor and its text (": ", " - ", " :: ");
- ``joiner``: between two fields (one line break, or a blank line);
- ``enumeration``: how options are lettered ("A. ", "(A) ", "A) ", "a. ", "(a) "): multiple choice only;
- ``instruction``: the task's instruction shown before the prompt, or not.

Variant 0 is the task itself, its prompt byte for byte. Variant N > 0 is the N-th format in one fixed order, the same
on every machine and Python: each next format is the one that differs most from the task's own and every format
before it (ties broken by the sha256 of its key), so the first few variants already vary every choice. A task without
lettered options leaves the enumeration out (formats that differ only in it would render alike), and a task without
an instruction the instruction.

What is rewritten is found in the rendered text, so built-in tasks and task files are restyled alike: a line that
starts with a field descriptor (``DESCRIPTORS`` followed by ":"), the block of the item's lettered options as
``render_mc`` writes them ("A. text" lines, in order), and the answer cue. Everything else (the question, the
passage) is kept as it is. An lm-eval task renders its own prompt (``Task.contexts``): it has variant 0 only.

A lower-case enumeration changes the answer's form: the target is the gold letter in lower case ("a"), the strict
extractor reads that variant's labels ("a", "(a)") and returns the canonical letter, and the letters' log-likelihood
scores " a", " b", ... The gold stays the canonical upper-case letter, so scores compare across variants.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import re
from collections.abc import Iterator

from softeval.errors import UserError
from softeval.tasks.base import LETTERS, Example, Task, lenient_letter, strict_letter

# The grammar's revision: a run of variant N > 0 records it (store/identity.py PROMPT_GRAMMAR), so that a change to
# the grammar (a new choice, another order) makes a run of the old one another run.
GRAMMAR_REVISION = 1

DESCRIPTORS = ("Subject", "Title", "Passage", "Background", "Context", "Question", "Problem", "Answer", "Solution")
# the other names of the descriptors: short ones for the question and the answer, a synonym for the others
SHORT = {"Question": "Q", "Answer": "A", "Problem": "Q", "Solution": "A", "Passage": "Context",
         "Background": "Context", "Context": "Passage", "Subject": "Topic", "Title": "Topic"}
NAMES = ("as written", "short")
CASINGS = ("as written", "upper", "lower")
SEPARATORS = (": ", " - ", " :: ")
JOINERS = ("\n", "\n\n")
ENUMERATIONS = ("A. ", "(A) ", "A) ", "a. ", "(a) ")
INSTRUCTIONS = (True, False)
# most variants a run or a sweep may ask for (--prompt-variants): more than any grammar dimension's product needs
MOST_VARIANTS = 64

_DESCRIPTOR = re.compile(rf"^({'|'.join(DESCRIPTORS)}):(?: |$)")


@dataclasses.dataclass(frozen=True)
class PromptFormat:
    """One format of the grammar (the module docstring says each choice)."""

    names: str = NAMES[0]
    casing: str = CASINGS[0]
    separator: str = SEPARATORS[0]
    joiner: str = JOINERS[0]
    enumeration: str = ENUMERATIONS[0]
    instruction: bool = True

    @property
    def key(self) -> str:
        """The format as one line (what orders the grammar, and what a run's prompt_format shows)."""
        return (f"names={self.names}|casing={self.casing}|separator={self.separator!r}|joiner={self.joiner!r}|"
                f"enumeration={self.enumeration!r}|instruction={'shown' if self.instruction else 'none'}")

    @property
    def lower_labels(self) -> bool:
        return "a" in self.enumeration

    def label(self, letter: str) -> str:
        """How option ``letter`` ("B") is written in this enumeration: "B. ", "(b) "."""
        if self.lower_labels:
            return self.enumeration.replace("a", letter.lower())
        return self.enumeration.replace("A", letter)

    def descriptor(self, name: str) -> str:
        """A field descriptor ("Question") as this format writes it, without the separator ("Q", "QUESTION")."""
        word = SHORT.get(name, name) if self.names == "short" else name
        return word.upper() if self.casing == "upper" else word.lower() if self.casing == "lower" else word


OWN = PromptFormat()  # the task's own format: variant 0


@functools.cache
def _grammar(lettered: bool, instructed: bool = True) -> tuple[PromptFormat, ...]:
    """Every format but the task's own, in the fixed order: each next format the one that differs from the task's and
    from every format before it in the most choices (ties: by the sha256 of its key), so the first few variants
    already vary every choice; without lettered options, the enumeration is left as is (formats that differ only in
    it would render alike), and so is the instruction of a task without one."""
    enumerations = ENUMERATIONS if lettered else ENUMERATIONS[:1]
    instructions = INSTRUCTIONS if instructed else INSTRUCTIONS[:1]
    formats = sorted((PromptFormat(*choice) for choice in itertools.product(
        NAMES, CASINGS, SEPARATORS, JOINERS, enumerations, instructions)),
        key=lambda f: hashlib.sha256(f.key.encode()).hexdigest())
    formats.remove(OWN)
    nearest = [_distance(f, OWN) for f in formats]  # each format's fewest differences from those chosen
    chosen: list[PromptFormat] = []
    while formats:
        best = max(range(len(formats)), key=lambda i: (nearest[i], -i))
        pick = formats.pop(best)
        nearest.pop(best)
        chosen.append(pick)
        nearest = [min(d, _distance(f, pick)) for f, d in zip(formats, nearest)]
    return tuple(chosen)


def _distance(a: PromptFormat, b: PromptFormat) -> int:
    """In how many choices two formats differ."""
    return sum(x != y for x, y in zip(dataclasses.astuple(a), dataclasses.astuple(b)))


def count(task: Task) -> int:
    """How many variants ``task`` has (variant 0 included): 1 for a task that renders its own prompts."""
    return 1 if task.contexts is not None else 1 + len(_grammar(_lettered(task), bool(task.instruction)))


def format_of(task: Task, variant: int, spelled: str = "") -> PromptFormat:
    """The format of ``task``'s variant ``variant`` (0: its own); ``spelled``: the option as the user wrote it, for
    the refusal of a variant the task does not have."""
    if variant == 0:
        return OWN
    grammar = _grammar(_lettered(task), bool(task.instruction))
    if not 0 < variant <= len(grammar):
        raise UserError(f"{spelled or f'--prompt-variant {variant}'}: task {task.name} has prompt variants 0 to "
                        f"{len(grammar)}")
    return grammar[variant - 1]


def _lettered(task: Task) -> bool:
    """Whether the task's options are lettered and read as letters (the enumeration applies): multiple choice read
    by the strict letter extractor (a task file with an answer_regex of its own keeps upper-case labels)."""
    return task.multiple_choice and task.strict is strict_letter


def variant_task(task: Task, variant: int, spelled: str = "") -> Task:
    """``task`` as its prompt variant ``variant`` renders and reads it (variant 0: ``task`` itself); ``spelled``: the
    option as the user wrote it (``--prompt-variant 3``, ``prompt_variant: 3``), for refusals."""
    if variant == 0:
        return task
    spelled = spelled or f"--prompt-variant {variant}"
    if task.contexts is not None:
        raise UserError(f"{spelled}: {task.name} renders its own prompt (an lm-eval task keeps "
                        "lm-eval's prompt), so it has variant 0 only; prompt variants apply to built-in tasks and "
                        "task files")
    fmt = format_of(task, variant, spelled)
    lettered = _lettered(task)
    changes: dict = {
        "render": lambda e: restyle(task.render(e), fmt, e if lettered else None),
        "cue": restyle(task.cue, fmt) if task.cue else "",
        "instruction_shown": task.instruction_shown and fmt.instruction,
        "prompt_format": fmt.key,
    }
    if task.cloze is not None:
        changes["cloze"] = lambda e: restyle(task.cloze(e), fmt)
    if lettered and fmt.lower_labels:
        changes.update(target=lambda e: " " + e.gold.lower(), strict=strict_lower, lenient=lenient_lower,
                       labels=LETTERS.lower())
    return dataclasses.replace(task, **changes)


def strict_lower(output: str, example: Example) -> str | None:
    """``strict_letter`` for lower-case labels: "b", "b)", "(b)" -> "B"; "a good" is the article, no answer."""
    return strict_letter(_swap_labels(output, len(example.options)), example)


def lenient_lower(output: str, example: Example) -> str | None:
    """The lower-case label the output starts with, else where ``lenient_letter`` finds an answer."""
    return strict_lower(output, example) or lenient_letter(output, example)


def _swap_labels(output: str, n: int) -> str:
    """``output`` with a leading lower-case label ("b", "(b)") in upper case and an upper-case one in lower case, so
    the upper-case reader reads the lower-case format (and not the other)."""
    found = re.match(rf"\s*\(?([a-{LETTERS[n - 1].lower()}A-{LETTERS[n - 1]}])", output)
    if not found:
        return output
    letter = found.group(1)
    return output[:found.start(1)] + letter.swapcase() + output[found.end(1):]


def restyle(text: str, fmt: PromptFormat, example: Example | None = None) -> str:
    """``text`` (a rendered prompt, a cloze prompt or a cue) in format ``fmt``: each field descriptor line restyled,
    the fields joined by ``fmt.joiner``, and ``example``'s lettered options (when given and found) enumerated."""
    if fmt == OWN:
        return text
    before, options, after = _split_options(text, example)
    blocks = list(_blocks(before))
    if options is not None:
        blocks.append("\n".join(fmt.label(LETTERS[i]) + str(o).strip() for i, o in enumerate(options)))
    blocks += list(_blocks(after))
    return fmt.joiner.join(_restyle_block(b, fmt) for b in blocks)


def _split_options(text: str, example: Example | None) -> tuple[str, tuple | None, str]:
    """``text`` around its options block ("A. x\\nB. y", on lines of their own), or (text, None, "")."""
    if example is None or not example.options:
        return text, None, ""
    block = "\n".join(f"{LETTERS[i]}. {str(o).strip()}" for i, o in enumerate(example.options))
    start = text.rfind(block)
    end = start + len(block)
    if start < 0 or (start > 0 and text[start - 1] != "\n") or (end < len(text) and text[end] != "\n"):
        return text, None, ""
    return text[:max(start - 1, 0)], example.options, text[end + 1:]


def _blocks(text: str) -> Iterator[str]:
    """The fields of ``text``: each starts at a descriptor line and holds the lines up to the next one."""
    if not text:
        return
    block: list[str] = []
    for line in text.split("\n"):
        if _DESCRIPTOR.match(line) and block:
            yield "\n".join(block)
            block = []
        block.append(line)
    yield "\n".join(block)


def _restyle_block(block: str, fmt: PromptFormat) -> str:
    found = _DESCRIPTOR.match(block)
    if not found:
        return block
    rest = block[found.end():]
    head = fmt.descriptor(found.group(1))
    return head + (fmt.separator + rest if rest else fmt.separator.rstrip())
