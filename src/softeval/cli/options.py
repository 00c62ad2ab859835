"""Command-line flags from the option table (run/config.py): their names, types, choices, defaults and
help are the table's, so a flag and a sweep file's key cannot drift apart. A row's live choices (``--backend``'s)
are read when a value is checked or the usage shown, and a help the row writes by a function when ``--help``
shows it: a backend registered or installed after the table was defined is among them. Each flag goes in its
row's group (``GROUPS``: model and task, methods, tuning, LoRA, engine, output, advanced), which help shows in
that order. Every flag records that it was given (``given_options``): a run names the options it was given and
does not use (run/validate.py, ``unused_note``), never one left at its default."""

from __future__ import annotations

import argparse

from softeval.run.config import BY_TARGET, GROUPS, OPTIONS, Option

GIVEN = "_given_options"  # the parsed arguments' attribute: the option keys given on the command line


def given_options(args: argparse.Namespace) -> frozenset[str]:
    """The keys of the options the command line gave (``--lora-rank 8`` too, though 8 is its default)."""
    return frozenset(getattr(args, GIVEN, ()))


def _recording(action: type[argparse.Action]) -> type[argparse.Action]:
    """``action``, also adding its option's key to the parsed arguments' ``GIVEN`` when the flag is given."""

    class Given(action):
        def __call__(self, parser, namespace, values, option_string=None):
            super().__call__(parser, namespace, values, option_string)
            setattr(namespace, GIVEN, given_options(namespace) | {self.dest})

    Given.__name__ = Given.__qualname__ = f"Given{action.__name__}"
    return Given


class KeyValues(argparse.Action):
    """``--flag KEY=VALUE``, given once per key, into one dict; VALUE is read as a whole number, a number,
    true/false or else text (``tensor_parallel_size=2``, ``enforce_eager=true``)."""

    def __call__(self, parser, namespace, text, option_string=None):
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            parser.error(f"{option_string} takes KEY=VALUE, not {text!r}")
        found = dict(getattr(namespace, self.dest, None) or {})
        found[key.strip()] = typed_value(value.strip())
        setattr(namespace, self.dest, found)


class LateHelp(argparse._StoreAction):
    """A flag whose help text is written when ``--help`` shows it (``help``: a function that writes it)."""

    @property
    def help(self) -> str:
        return self._write()

    @help.setter
    def help(self, write) -> None:
        self._write = write


def typed_value(text: str):
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def or_none(kind: type):
    """A nullable number's flag type: the number, or ``none`` for "not set" (``--answer-share none``)."""

    def read(text: str):
        return None if text.strip().lower() == "none" else kind(text)

    read.__name__ = kind.__name__  # argparse names the type in its error: "invalid float value: 'x'"
    return read


def option_group(p: argparse.ArgumentParser, group: str) -> argparse._ArgumentGroup:
    """``p``'s argument group ``group`` (a title of ``GROUPS``). All of them are made the first time, in
    ``GROUPS``' order, so help lists them in that order whatever is added first; one left empty is not shown."""
    made = getattr(p, "_softeval_groups", None)
    if made is None:
        made = {title: p.add_argument_group(title, line) for title, line in GROUPS.items()}
        p._softeval_groups = made
    return made[group]


def add_options(p: argparse.ArgumentParser, where: str) -> None:
    """The flags of the table's rows given ``where`` (COMMON, TUNING or EVAL), in the table's order, each
    in its row's group."""
    for row in OPTIONS.values():
        if row.where == where:
            add_option(option_group(p, row.group), row)


def _value_kwargs(row: Option) -> dict:
    """argparse's settings of a flag that takes a value (not a switch, a KEY=VALUE or a required one)."""
    kwargs = {"default": BY_TARGET if row.by_target else row.default}  # argparse leaves a non-text default be
    if row.type is not str:
        kwargs["type"] = or_none(row.type) if row.nullable else row.type
    if row.choices is not None:
        kwargs["choices"] = row.choices  # as it is (a live view stays one)
    if row.metavar is not None:
        kwargs["metavar"] = row.metavar
    return kwargs


def _kwargs_of(row: Option) -> dict:
    """argparse's settings of one row's flag, by the row's type, help aside."""
    if row.type is dict:
        return {"action": KeyValues, "default": None, "metavar": row.metavar, "dest": row.key}
    if row.type is bool:
        action = argparse.BooleanOptionalAction if row.default else "store_true"
        return {"action": action, "default": row.default} if row.default else {"action": action}
    if row.required:
        return {"required": True}
    return _value_kwargs(row)


def _help_writer(row: Option, passed_on: bool):
    """The function that writes one row's help text."""

    def help() -> str:
        text = row.help() if callable(row.help) else row.help
        if passed_on or row.by_target:  # the flag's own default is not the table's: the help shows the table's
            text = text % {"default": "none" if row.default is None else row.default}
        return text

    return help


def add_option(p: argparse.ArgumentParser | argparse._ArgumentGroup, row: Option, passed_on: bool = False) -> None:
    """One row's flag. ``passed_on``: the flag of a command that hands the option to runs it builds
    (`softeval track`): not given, it is absent from the parsed arguments (``none`` given is None), so the run's own
    default applies, and the help says it."""
    kwargs = _kwargs_of(row)
    help = _help_writer(row, passed_on)
    if callable(row.help):
        kwargs["action"] = LateHelp
    if passed_on:
        kwargs["default"] = argparse.SUPPRESS
    action = kwargs.get("action", "store")
    kwargs["action"] = _recording(p._registry_get("action", action, action))
    p.add_argument(row.flag, help=help if callable(row.help) else help(), **kwargs)
