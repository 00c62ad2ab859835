"""softeval's one registry shape (softeval/registry.py): lazy built-ins, registered objects, entry points read once
per process, and an entry point that does not load is one line when chosen and breaks nothing else."""

from __future__ import annotations

import sys
import textwrap

import pytest
from distributions import installed

from softeval.errors import UserError
from softeval.registry import Registry, reread_entry_points

GROUP = "softeval.registry_test"
FILES = {
    "regtest_good/__init__.py": "THING = 'good thing'\n",
    "regtest_exits/__init__.py": "raise SystemExit('no, thanks')\n",
    "regtest_bad/__init__.py": "THING = 42\n",
    "regtest_lazy.py": "THING = 'lazy thing'\n",
    "regtest-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: regtest\nVersion: 1.0\n",
    "regtest-1.0.dist-info/entry_points.txt": textwrap.dedent(f"""
        [{GROUP}]
        good = regtest_good:THING
        missing = regtest_not_installed:THING
        exits = regtest_exits:THING
        bad = regtest_bad:THING
        first = regtest_good:THING
        """),
}
MODULES = ("regtest_good", "regtest_exits", "regtest_bad", "regtest_lazy")


def is_text(name: str, obj: object) -> str:
    if not isinstance(obj, str):
        raise TypeError(f"it names {obj!r}, not a text")
    return obj


@pytest.fixture
def dist(tmp_path, monkeypatch):
    """The test's distribution installed (its folder on sys.path) for one test."""
    with installed(tmp_path, FILES, MODULES, monkeypatch):
        yield


def test_a_built_in_is_imported_only_when_asked_for(dist):
    things = Registry("thing", None, [("lazy", "regtest_lazy:THING"), ("first", ["an object"])])
    assert things.names() == ("lazy", "first") and "lazy" in things and "other" not in things
    assert "regtest_lazy" not in sys.modules
    assert things.get("lazy") == "lazy thing" and "regtest_lazy" in sys.modules
    with pytest.raises(UserError, match="^unknown thing 'other': use lazy, first$"):
        things.get("other")


def test_registered_objects_come_after_the_built_ins_and_leave_their_names_alone():
    things = Registry("thing", None, [("first", "softeval.version:__version__")], check=is_text)
    assert things.register("mine", "my thing") == "my thing"
    assert things.names() == ("first", "mine") and things.get("mine") == "my thing"
    with pytest.raises(ValueError, match="built in"):
        things.register("first", "another")  # a built-in's name stays the built-in's
    with pytest.raises(ValueError, match="registered already"):
        things.register("mine", "another")
    things.register("mine", "another", replace=True)
    with pytest.raises(TypeError, match="not a text"):
        things.register("number", 3)  # the check holds for what a program registers too
    things.unregister("mine")
    assert things.names() == ("first",)


def test_entry_points_are_listed_and_a_broken_one_is_one_line_when_chosen(dist):
    things = Registry("thing", GROUP, [("first", "regtest_lazy:THING")], check=is_text)
    assert things.names() == ("first", "good", "missing", "exits", "bad")  # an entry point's `first` passed over
    assert not {"regtest_good", "regtest_exits"} & set(sys.modules)  # listing loads nothing
    assert things.get("good") == "good thing" and things.get("first") == "lazy thing"
    said = {
        "missing": "(ModuleNotFoundError: No module named 'regtest_not_installed')",
        "exits": "(SystemExit: no, thanks)",  # a plug-in's import that exits is a broken entry, not softeval's exit
        "bad": "(TypeError: it names 42, not a text)",
    }
    for name, why in said.items():
        with pytest.raises(UserError) as err:
            things.get(name)
        entry = dict(line.split(" = ") for line in FILES["regtest-1.0.dist-info/entry_points.txt"].split("\n")
                     if " = " in line)[name]
        assert str(err.value) == (f"thing {name} ({GROUP} entry point {entry} of regtest) does not load {why}: fix or "
                                  "reinstall that package, or choose another thing")
    loaded = things.loaded()  # every entry, the broken ones as the error choosing them raises
    assert [n for n, obj in loaded.items() if isinstance(obj, UserError)] == ["missing", "exits", "bad"]
    assert things.get("good") == "good thing"  # the broken ones broke nothing else


def test_entry_points_are_read_once_until_reread(tmp_path, monkeypatch):
    things = Registry("thing", GROUP, [], check=is_text)
    assert things.names() == ()
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert things.names() == ()  # read once per process
        reread_entry_points()
        assert "good" in things.names() and things.get("good") == "good thing"
    finally:
        monkeypatch.undo()
        reread_entry_points()
        for name in MODULES:
            sys.modules.pop(name, None)
    assert things.names() == ()
