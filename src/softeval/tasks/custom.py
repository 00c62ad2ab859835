"""User-defined tasks from a YAML or JSON file, without code (schema: docs/tasks.md).

The file is read with ``yaml.safe_load`` (JSON is YAML) within the bounds of ``softeval.yamlfile``, templates
are rendered by a sandboxed Jinja
environment with ``StrictUndefined`` (no attribute tricks, no code, a missing variable is an error),
and regexes are compiled once. Every row is checked when the task loads: a missing field, an answer
outside the options or a template that cannot be filled is an error naming the file and the row (or,
with ``--skip-bad-rows``, a counted skip).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import regex
from jinja2 import StrictUndefined, TemplateError
from jinja2.sandbox import SandboxedEnvironment

from softeval.checks import is_number, is_whole
from softeval.errors import UserError, shown
from softeval.protocol import ONE_LINE, TARGET_KINDS
from softeval.tasks.base import (
    HELD_OUT_SEED,
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
from softeval.yamlfile import read_yaml

SUFFIXES = (".yaml", ".yml", ".json")
MATCHERS = ("exact", "numeric", "f1")
REGEX_SECONDS = 1.0  # a task file's regex gets this long per output; past it the item is unscorable
_TEXT, _NAME, _NAMES, _NAME_OR_NAMES = "a string", "a field name", "a list of field names", \
    "a field name or a list of field names"
# Every setting and what its value must be (docs/tasks.md); a value of another type is an error
# naming the setting, before any row is read.
SCHEMA = {"name": _TEXT, "description": _TEXT, "data": "a file path", "tune_data": "a file path",
          "split": "a mapping", "fields": _NAMES, "answer_field": _NAME, "aliases_field": _NAME,
          "options_field": _NAME_OR_NAMES, "id_field": _NAME, "instruction": _TEXT, "prompt": _TEXT,
          "cloze_prompt": _TEXT, "target": _TEXT, "answer_regex": _TEXT, "lenient_regex": _TEXT, "matcher": _TEXT,
          "stop": "a string or a list of non-empty strings", "max_new_tokens": "a whole number from 1 to 32768",
          "target_kind": " or ".join(TARGET_KINDS)}
KEYS = set(SCHEMA)
REQUIRED = ("data", "prompt", "answer_field")
_ENV = SandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)


def is_task_file(name: str) -> bool:
    return name.lower().endswith(SUFFIXES)


def _fail(path: Path, problem: str) -> UserError:
    return UserError(f"task file {path}: {problem}")


def read_spec(path: Path) -> dict:
    if error := missing_file(path, "task file"):
        raise error
    spec = read_yaml(path, f"task file {path}")
    if not isinstance(spec, dict):
        raise _fail(path, "must be a mapping of settings (see docs/tasks.md)")
    unknown = sorted(str(k) for k in set(spec) - KEYS)
    if unknown:
        raise _fail(path, f"unknown setting(s) {', '.join(unknown)}; allowed: {', '.join(sorted(KEYS))}")
    spec = {k: v for k, v in spec.items() if v is not None}  # `key:` with no value: as if absent
    missing = [k for k in REQUIRED if k not in spec or spec[k] == ""]
    if missing:
        raise _fail(path, f"lacks the required setting(s) {', '.join(missing)}")
    for key, value in spec.items():
        if not _typed(key, value):
            raise _fail(path, f"{key} must be {SCHEMA[key]}, not {type(value).__name__} {shown(value)}")
    return spec


def _typed(key: str, value: Any) -> bool:
    """Does ``value`` have the type ``SCHEMA[key]`` asks for? (bool is no number here.)"""
    kind = SCHEMA[key]
    names = lambda v: isinstance(v, list) and all(isinstance(x, str) and x for x in v)
    if kind in (_NAME, "a file path"):
        return isinstance(value, str) and bool(value.strip())
    if kind == _NAMES:
        return names(value)
    if kind == _NAME_OR_NAMES:
        return (isinstance(value, str) and bool(value)) or (names(value) and len(value) >= 2)
    if kind == "a mapping":
        return isinstance(value, dict)
    if key == "stop":
        return (isinstance(value, str) and bool(value)) or names(value)
    if key == "max_new_tokens":
        return is_whole(value) and 1 <= value <= 32768
    if key == "target_kind":
        return value in TARGET_KINDS
    return isinstance(value, str)


def _template(path: Path, spec: dict, key: str, default: str | None = None):
    text = spec.get(key, default)
    if not isinstance(text, str):
        raise _fail(path, f"{key} must be a string template")
    try:
        return _ENV.from_string(text)
    except (TemplateError, RecursionError, ValueError, TypeError) as err:
        raise _fail(path, f"{key} is not a valid template ({err})") from None


def _regex(path: Path, spec: dict, key: str) -> regex.Pattern | None:
    """A task file's regex, compiled by the ``regex`` module (the syntax of Python's ``re``), which can
    stop a search that backtracks for too long: a user's pattern cannot stall a run."""
    text = spec.get(key)
    if text is None:
        return None
    try:
        return regex.compile(str(text))
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
    spec = read_spec(path)
    base = path.resolve().parent
    matcher = spec.get("matcher", "exact")
    if matcher not in MATCHERS:
        raise _fail(path, f"matcher {shown(matcher)} is not one of {', '.join(MATCHERS)}")
    prompt = _template(path, spec, "prompt")
    target_t = _template(path, spec, "target", " {{ gold }}")
    cloze_t = _template(path, spec, "cloze_prompt") if spec.get("cloze_prompt") is not None else prompt
    instruction = spec.get("instruction", "")
    strict_re, lenient_re = _regex(path, spec, "answer_regex"), _regex(path, spec, "lenient_regex")
    strict = partial(_extract, strict_re) if strict_re is not None else strict_letter
    split_rule = _split_rule(path, spec.get("split") or {})
    options_field = spec.get("options_field")
    multiple_choice = options_field is not None
    if matcher == "numeric" and multiple_choice:
        raise _fail(path, "a multiple-choice task (options_field) is matched by letter: leave matcher as exact")
    if not multiple_choice and strict_re is None:
        raise _fail(path, "answer_regex is required (the strict answer format) unless options_field is set")
    fields = spec.get("fields") or []
    stop = spec.get("stop", ["\n"])
    stop = (stop,) if isinstance(stop, str) else tuple(stop)
    max_new_tokens = spec.get("max_new_tokens", 32)

    def to_example(row: dict, index: int, where: str) -> Example:
        opt_fields = [options_field] if isinstance(options_field, str) else list(options_field or [])
        require_fields(row, [*fields, spec["answer_field"], *opt_fields], where, index)
        options: tuple[str, ...] = ()
        if isinstance(options_field, str):
            value = row[options_field]
            if not isinstance(value, (list, tuple)):
                raise UserError(f"{where}: row {index} field {options_field} is not a list of options")
            options = tuple(str(v) for v in value)
        elif opt_fields:
            options = tuple(str(row[f]) for f in opt_fields)
        answer = row[spec["answer_field"]]
        if multiple_choice:
            gold = letter_gold(answer, options, where, index)  # a letter, an option's text or a 0-based index
        elif matcher == "numeric":
            gold = normalize_number(str(answer)) or ""
            if not gold:
                raise UserError(f"{where}: row {index} has answer {shown(answer)}, which is not a number")
        else:
            gold = str(answer).strip()
            if not gold:
                raise UserError(f"{where}: row {index} has an empty answer")
        aliases: tuple[str, ...] = ()
        if spec.get("aliases_field") and row.get(spec["aliases_field"]) is not None:
            raw = row[spec["aliases_field"]]
            aliases = tuple(str(a) for a in ([raw] if isinstance(raw, str) else raw) if str(a).strip())
        ident = str(row.get(spec["id_field"])) if spec.get("id_field") and row.get(spec["id_field"]) is not None \
            else f"{Path(where).name}/{index}"
        example = Example(id=ident, fields=dict(row), gold=gold, aliases=aliases, options=options)
        templates = [("prompt", prompt), ("target", target_t)] \
            + ([("cloze_prompt", cloze_t)] if multiple_choice else [])
        rendered = {}
        for name, template in templates:
            try:
                rendered[name] = template.render(_variables(example))
            except Exception as err:  # noqa: BLE001 (a user's template: any failure is theirs, named by row)
                raise UserError(f"{where}: row {index}: the {name} template cannot be filled ({err})") from None
        _check_target(rendered["target"], strict, example, f"{where}: row {index}")
        return example

    def read(data: str, skip_bad_rows: bool, relative: bool = True) -> tuple[list[Example], int]:
        file = (base / data) if relative and not Path(data).is_absolute() else Path(data)
        return convert_rows(read_local(file), partial(_convert, to_example=to_example, where=str(file)), str(file),
                            skip_bad_rows)

    def load(source: str = "offline", skip_bad_rows: bool = False, **options) -> Splits:
        if source == "hub":
            raise UserError(f"task file {path}: a user-defined task reads its data file; --source hub does not apply")
        data, relative = (spec["data"], True) if source == "offline" else (source, False)
        examples, skipped = read(data, skip_bad_rows, relative)
        origin = f"file ({data})"
        if spec.get("tune_data"):
            tune, bad = read(spec["tune_data"], skip_bad_rows)
            return Splits(tune, examples, origin, f"tune file ({spec['tune_data']})", f"data file ({data})",
                          skipped_rows=skipped + bad)
        return _held_out(path, split_rule, examples, origin, skipped)

    return Task(
        name=str(spec.get("name") or path.stem),
        description=str(spec.get("description") or f"user-defined task from {path}"),
        instruction=str(instruction),
        render=lambda e: prompt.render(_variables(e)),
        target=lambda e: target_t.render(_variables(e)),
        strict=strict,
        lenient=_lenient(lenient_re, strict_re, matcher, multiple_choice),
        match=match_exact if multiple_choice else match_number if matcher == "numeric" else match_any,
        load=load,
        stop=stop,
        max_new_tokens=max_new_tokens,
        multiple_choice=multiple_choice,
        sources=("file",),
        extra={"f1": f1_max, "task_file": str(path)} if matcher == "f1" else {"task_file": str(path)},
        cloze=(lambda e: cloze_t.render(_variables(e))) if multiple_choice else None,
        cue=prompt_cue(spec["prompt"]),
        target_kind=declared_target_kind(spec),
    )


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


def _convert(row: dict, index: int, *, to_example, where: str) -> Example:
    return to_example(row, index, where)


def _lenient(lenient_re, strict_re, matcher: str, multiple_choice: bool):
    """The lenient regex when given, else a default reader for the kind of answer."""
    if lenient_re is not None:
        return partial(_extract, lenient_re)
    if multiple_choice:
        return lenient_letter
    if matcher == "numeric":
        return lenient_last_number
    return lenient_contains


def _split_rule(path: Path, rule: dict) -> tuple[int, int | None, float | None]:
    """``split``: (seed, n_tune, fraction), each checked for its type and range."""
    if set(rule) - {"seed", "n_tune", "fraction"}:
        raise _fail(path, "split must be a mapping with seed and n_tune or fraction")
    seed = rule.get("seed", HELD_OUT_SEED)
    if not is_whole(seed):
        raise _fail(path, f"split.seed must be a whole number, not {shown(seed)}")
    if "n_tune" in rule and "fraction" in rule:
        raise _fail(path, "split: give n_tune or fraction, not both")
    n_tune, fraction = rule.get("n_tune"), rule.get("fraction")
    if n_tune is not None and (not is_whole(n_tune) or n_tune < 1):
        raise _fail(path, f"split.n_tune must be a whole number of at least 1, not {shown(n_tune)}")
    if fraction is not None and (not is_number(fraction) or not 0 < fraction < 1):
        raise _fail(path, f"split.fraction must be between 0 and 1, not {shown(fraction)}")
    return seed, n_tune, fraction


def _held_out(path: Path, rule: tuple, examples: list[Example], origin: str, skipped: int) -> Splits:
    """The data file held out by the task file's ``split`` rule: ``n_tune`` items, or ``fraction`` of
    them, or by default a third (at most 1,000) tune, the rest are scored (``held_out_splits``)."""
    seed, n_tune, fraction = rule
    if fraction is not None:
        n_tune = max(1, round(len(examples) * fraction))
    elif n_tune is None:
        n_tune = file_n_tune(len(examples))
    return held_out_splits(examples, n_tune, seed, origin, "data", skipped, where=f"task file {path}",
                           note="tuned on a seeded held-out part of the data file, scored on the rest")
