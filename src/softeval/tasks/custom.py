"""User-defined tasks from a YAML or JSON file, without code (docs/reference/task-format.md).

The file is read with ``yaml.safe_load`` (JSON is YAML) within the bounds of ``softeval.yamlfile`` and its
settings are checked by their one declaration (``tasks.schema.TaskFile``, which `softeval schema task` prints as
JSON Schema); templates are rendered by a sandboxed Jinja
environment with ``StrictUndefined`` (no attribute tricks, no code, a missing variable is an error), each
rendering of a row bounded in time and size (``tasks.sandbox``), and regexes are compiled once. Every row is
checked when the task loads: a missing field, an answer outside the options or a template that cannot be filled
is an error naming the file and the row (or, with ``--skip-bad-rows``, a counted skip).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import regex
from jinja2 import Template, TemplateError

from softeval.constants import ONE_LINE
from softeval.errors import UserError, shown
from softeval.tasks.base import (
    LETTERS,
    Example,
    Splits,
    Task,
    Unscorable,
    file_n_tune,
    held_out_splits,
    lenient_letter,
    letter_gold,
    match_exact,
    match_number,
    normalize_number,
    strict_letter,
)
from softeval.tasks.data import convert_rows, missing_file, read_local, require_fields
from softeval.tasks.gsm8k import lenient as lenient_last_number
from softeval.tasks.qa import f1_max, lenient_contains, match_any
from softeval.tasks.sandbox import BoundedSandbox, RenderBound, render
from softeval.tasks.schema import Split, TaskFile, checked
from softeval.yamlfile import read_yaml

SUFFIXES = (".yaml", ".yml", ".json")
REGEX_SECONDS = 1.0  # a task file's regex gets this long per output; past it the item is unscorable
# every setting (tasks/schema.py declares them, docs/reference/task-format.md says what each does)
KEYS = set(TaskFile.model_fields)
_ENV = BoundedSandbox()


def is_task_file(name: str) -> bool:
    return name.lower().endswith(SUFFIXES)


def _fail(path: Path, problem: str) -> UserError:
    return UserError(f"task file {path}: {problem}")


def read_spec(path: Path) -> dict:
    """A task file's settings as it writes them (a setting without a value left out), once its declaration
    (tasks/schema.py) has checked them: an unknown, missing or wrongly typed setting is a UserError naming the
    file and the setting."""
    return _read(path)[0]


def read_settings(path: Path) -> TaskFile:
    """A task file's settings, checked, with the declared defaults of those it leaves out."""
    return _read(path)[1]


def _read(path: Path) -> tuple[dict, TaskFile]:
    if error := missing_file(path, "task file"):
        raise error
    spec = read_yaml(path, f"task file {path}")
    if not isinstance(spec, dict):
        raise _fail(path, "must be a mapping of settings (see docs/reference/task-format.md)")
    settings = checked(spec, f"task file {path}")
    return {k: v for k, v in spec.items() if v is not None}, settings


def _template(path: Path, key: str, text: str) -> Template:
    try:
        return _ENV.from_string(text)
    except (TemplateError, RecursionError, ValueError, TypeError) as err:
        raise _fail(path, f"{key} is not a valid template ({err})") from None


def _regex(path: Path, key: str, text: str | None) -> regex.Pattern | None:
    """A task file's regex, compiled by the ``regex`` module (the syntax of Python's ``re``), which can
    stop a search that backtracks for too long: a user's pattern cannot stall a run."""
    if text is None:
        return None
    try:
        return regex.compile(text)
    except (regex.error, OverflowError, RecursionError, ValueError) as err:
        raise _fail(path, f"{key} is not a valid regular expression ({err})") from None


def _extract(pattern: regex.Pattern, output: str, example: Example) -> str | None:
    """First match of ``pattern`` in the output: its first group (or the whole match), stripped.
    A search that runs past REGEX_SECONDS raises ``Unscorable`` (the item is counted apart)."""
    try:
        found = pattern.search(output, timeout=REGEX_SECONDS)
    except TimeoutError:
        raise Unscorable(f"the regex {shown(pattern.pattern)} ran past {REGEX_SECONDS} s on this output") from None
    if not found:
        return None
    value = next((g for g in found.groups() if g is not None), None) if found.groups() else found.group(0)
    value = (value or "").strip()
    return value or None


def _variables(example: Example) -> dict[str, Any]:
    options = list(example.options)
    return {**example.fields, "options": options, "letters": list(LETTERS[: len(options)]),
            "options_block": "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options)),
            "gold": example.gold, "aliases": list(example.aliases)}


def load_task_file(path: str | Path) -> Task:
    """Build a Task from a task file; every problem is a UserError naming the file."""
    path = Path(path)
    return _Reader.of(path, read_settings(path)).task()


@dataclass(frozen=True)
class _Reader:
    """A task file made ready to read its rows: its settings checked, its templates and regexes compiled. A row
    becomes an item (``example``) or a UserError naming the data file and the row."""

    path: Path
    folder: Path  # the task file's: its data files are relative to it
    settings: TaskFile
    prompt: Template
    target: Template
    cloze: Template
    strict: Any  # the strict extractor: answer_regex's, else the option letter's
    lenient_re: regex.Pattern | None

    @classmethod
    def of(cls, path: Path, settings: TaskFile) -> _Reader:
        prompt = _template(path, "prompt", settings.prompt)
        cloze = prompt if settings.cloze_prompt is None else _template(path, "cloze_prompt", settings.cloze_prompt)
        strict_re = _regex(path, "answer_regex", settings.answer_regex)
        return cls(path, path.resolve().parent, settings, prompt, _template(path, "target", settings.target), cloze,
                   partial(_extract, strict_re) if strict_re is not None else strict_letter,
                   _regex(path, "lenient_regex", settings.lenient_regex))

    @property
    def multiple_choice(self) -> bool:
        return self.settings.options_field is not None

    def task(self) -> Task:
        s, multiple_choice = self.settings, self.multiple_choice
        return Task(
            name=s.name or self.path.stem,
            description=s.description or f"user-defined task from {self.path}",
            instruction=s.instruction,
            render=partial(_rendered, self.prompt),
            target=partial(_rendered, self.target),
            strict=self.strict,
            lenient=_lenient(self.lenient_re, s.matcher, multiple_choice),
            match=match_exact if multiple_choice else match_number if s.matcher == "numeric" else match_any,
            load=self.load,
            stop=(s.stop,) if isinstance(s.stop, str) else tuple(s.stop),
            max_new_tokens=s.max_new_tokens,
            multiple_choice=multiple_choice,
            sources=("file",),
            extra={"f1": f1_max, "task_file": str(self.path)} if s.matcher == "f1" else {"task_file": str(self.path)},
            cloze=partial(_rendered, self.cloze) if multiple_choice else None,
            cue=prompt_cue(s.prompt),
            target_kind=s.target_kind,
        )

    def load(self, source: str = "offline", skip_bad_rows: bool = False, **options) -> Splits:
        """The data file held out by ``split``, or scored whole beside ``tune_data``; ``--source FILE`` replaces
        the data file."""
        if source == "hub":
            raise _fail(self.path, "a user-defined task reads its data file; --source hub does not apply")
        data, relative = (self.settings.data, True) if source == "offline" else (source, False)
        examples, skipped = self.read(data, skip_bad_rows, relative)
        origin, tune_data = f"file ({data})", self.settings.tune_data
        if tune_data:
            tune, bad = self.read(tune_data, skip_bad_rows)
            return Splits(tune, examples, origin, f"tune file ({tune_data})", f"data file ({data})",
                          skipped_rows=skipped + bad)
        return _held_out(self.path, self.settings.split or Split(), examples, origin, skipped)

    def read(self, data: str, skip_bad_rows: bool, relative: bool = True) -> tuple[list[Example], int]:
        file = (self.folder / data) if relative and not Path(data).is_absolute() else Path(data)
        return convert_rows(read_local(file), partial(self.example, where=str(file)), str(file), skip_bad_rows)

    def example(self, row: dict, index: int, where: str) -> Example:
        """One row as an item: its fields there, its templates filled, its target passing the strict format."""
        s = self.settings
        option_fields = [s.options_field] if isinstance(s.options_field, str) else list(s.options_field or [])
        require_fields(row, [*(s.fields or []), s.answer_field, *option_fields], where, index)
        options = self._options(row, index, where)
        example = Example(id=self._id(row, index, where), fields=dict(row),
                          gold=self._gold(row[s.answer_field], options, index, where), aliases=self._aliases(row),
                          options=options)
        self._fills(example, f"{where}: row {index}")
        return example

    def _options(self, row: dict, index: int, where: str) -> tuple[str, ...]:
        field = self.settings.options_field
        if not isinstance(field, str):
            return tuple(str(row[f]) for f in field or ())
        if not isinstance(row[field], (list, tuple)):
            raise UserError(f"{where}: row {index} field {field} is not a list of options")
        return tuple(str(v) for v in row[field])

    def _gold(self, answer: Any, options: tuple[str, ...], index: int, where: str) -> str:
        if self.multiple_choice:
            return letter_gold(answer, options, where, index)  # a letter, an option's text or a 0-based index
        if self.settings.matcher == "numeric":
            gold = normalize_number(str(answer)) or ""
            if not gold:
                raise UserError(f"{where}: row {index} has answer {shown(answer)}, which is not a number")
            return gold
        gold = str(answer).strip()
        if not gold:
            raise UserError(f"{where}: row {index} has an empty answer")
        return gold

    def _aliases(self, row: dict) -> tuple[str, ...]:
        field = self.settings.aliases_field
        raw = row.get(field) if field else None
        if raw is None:
            return ()
        return tuple(str(a) for a in ([raw] if isinstance(raw, str) else raw) if str(a).strip())

    def _id(self, row: dict, index: int, where: str) -> str:
        field = self.settings.id_field
        if field and row.get(field) is not None:
            return str(row[field])
        return f"{Path(where).name}/{index}"

    def _fills(self, example: Example, where: str) -> None:
        """Each of the item's templates can be filled, and its target passes the strict format."""
        templates = [("prompt", self.prompt), ("target", self.target)] \
            + ([("cloze_prompt", self.cloze)] if self.multiple_choice else [])
        rendered = {}
        for name, template in templates:
            try:
                rendered[name] = render(template, _variables(example))
            except Exception as err:  # noqa: BLE001 (a user's template: any failure is theirs, named by row)
                raise UserError(f"{where}: the {name} template cannot be filled ({err})") from None
        _check_target(rendered["target"], self.strict, example, where)


def _rendered(template: Template, example: Example) -> str:
    """A template filled with an item's fields, within the sandbox's bounds (every row was rendered so when its
    task loaded: one past them was refused then, naming its row)."""
    try:
        return render(template, _variables(example))
    except RenderBound as err:
        raise UserError(f"item {example.id}: a template cannot be filled ({err})") from None


def declared_target_kind(spec: dict) -> str:
    """What a task file says its targets are (``target_kind``; one-line when it does not say)."""
    return spec.get("target_kind", ONE_LINE)


def prompt_cue(prompt: str) -> str:
    """A task file's answer cue: the prompt template's last line when it is plain text (no template
    syntax), e.g. ``A:`` of ``Q: {{ question }}\nA:``; else none."""
    head, newline, last = prompt.rstrip(" ").rpartition("\n")
    return last.strip() if newline and last.strip() and "{" not in last and head.strip() else ""


def _check_target(target: str, strict, example: Example, where: str) -> None:
    """The tuning target must pass the strict extractor (``answer_regex``, or the option letter): a soft prompt
    tuned toward text that never counts as formatted would measure nothing."""
    try:
        passes = strict(target, example) is not None
    except Unscorable:
        passes = False
    if not passes:
        rule = f"answer_regex {shown(strict.args[0].pattern)}" if isinstance(strict, partial) \
            else "the strict letter format (the output starts with the option letter)"
        raise UserError(f"{where}: the target {shown(target)} does not pass {rule}, so a soft prompt tuned "
                        "toward it could never count as formatted: change target or answer_regex")


def _lenient(lenient_re, matcher: str, multiple_choice: bool):
    """The lenient regex when given, else a default reader for the kind of answer."""
    if lenient_re is not None:
        return partial(_extract, lenient_re)
    if multiple_choice:
        return lenient_letter
    if matcher == "numeric":
        return lenient_last_number
    return lenient_contains


def _held_out(path: Path, split: Split, examples: list[Example], origin: str, skipped: int) -> Splits:
    """The data file held out by the task file's ``split`` rule: ``n_tune`` items, or ``fraction`` of
    them, or by default a third (at most 1,000) tune, the rest are scored (``held_out_splits``)."""
    n_tune = split.n_tune
    if split.fraction is not None:
        n_tune = max(1, round(len(examples) * split.fraction))
    elif n_tune is None:
        n_tune = file_n_tune(len(examples))
    return held_out_splits(examples, n_tune, split.seed, origin, "data", skipped, where=f"task file {path}",
                           note="tuned on a seeded held-out part of the data file, scored on the rest")
