"""The one shape of softeval's plug-in registries (backends, tasks; methods next): things of one kind by name.

A ``Registry`` holds, in this order of its ``names()``:

- its **built-ins**, in the order given: each an object or the ``"module:attr"`` naming one (a text is always
  the latter), imported only when that entry is asked for (``get``), so listing the names imports nothing;
- what a program or a test ``register``s (``unregister`` takes it back); a built-in's name stays the built-in's;
- the **entry points** of its group (``group``: another distribution's ``[softeval.tasks]`` ``name = module:attr``),
  read once per process, when a name that is not built in or registered is looked up or every name is listed
  (``reread`` or ``reread_entry_points`` forgets that read: a test that installs a distribution at run time). An
  entry point with a built-in's or a registered name is passed over; of two with one name the first on
  ``sys.path`` counts.

Every object it hands out has passed its ``check`` (``check(name, obj)`` returns the object to keep, or raises with
why it is not one). An entry point that does not load (any exception its import raises, a ``SystemExit`` included,
or its ``check``'s) breaks nothing else: its name is still listed, and choosing it is one ``UserError`` line naming
the entry, its distribution and why. A built-in that does not import is softeval's bug, raised as it is.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable, Iterable
from importlib import metadata
from typing import Generic, TypeVar

from softeval.errors import UserError, shown

T = TypeVar("T")
WHY_CHARS = 200  # the most a broken entry's line quotes of its error's first line
_ALL: list[Registry] = []  # every registry made, for reread_entry_points


class Registry(Generic[T]):
    """Things of one ``kind`` ("task", "backend") by name: built-ins, registered, then entry points of ``group``."""

    def __init__(self, kind: str, group: str | None, built_in: Iterable[tuple[str, T | str]] = (),
                 check: Callable[[str, object], T] | None = None):
        self.kind, self.group = kind, group
        self._built_in: dict[str, T | str] = dict(built_in)  # an object, or the "module:attr" of one
        self._check = check
        self._registered: dict[str, T] = {}
        self._loaded: dict[str, T] = {}  # built-ins and entry points imported so far
        self._broken: dict[str, str] = {}  # an entry point that does not load: its one line
        self._entry_points: dict[str, metadata.EntryPoint] | None = None  # None: not read yet
        _ALL.append(self)

    def names(self) -> tuple[str, ...]:
        """Every name: the built-ins in their order, the registered ones, then the entry points' (nothing loaded)."""
        return tuple(dict.fromkeys([*self._built_in, *self._registered, *self._read()]))

    def built_in_names(self) -> tuple[str, ...]:
        return tuple(self._built_in)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._built_in or name in self._registered or name in self._read())

    def get(self, name: str) -> T:
        """The object called ``name``, imported now if it was not yet. An unknown name, or an entry point that does
        not load, is a UserError (one line)."""
        if not isinstance(name, str) or name not in self:
            raise UserError(f"unknown {self.kind} {shown(name)}: use {', '.join(self.names())}")
        if name in self._registered:  # a program's or a test's own, over a built-in only with ``replace``
            return self._registered[name]
        if name in self._built_in:
            return self._built(name)
        if name not in self._loaded and name not in self._broken:
            self._load_entry(name, self._read()[name])
        if name in self._broken:
            raise UserError(self._broken[name])
        return self._loaded[name]

    def loaded(self) -> dict[str, T | UserError]:
        """Every entry by name, loaded: its object, or the UserError choosing it raises (one that does not load)."""
        found: dict[str, T | UserError] = {}
        for name in self.names():
            try:
                found[name] = self.get(name)
            except UserError as err:
                found[name] = err
        return found

    def register(self, name: str, obj: T, replace: bool = False) -> T:
        """Add ``obj`` as ``name`` in this process (after its ``check``); returns what was kept. A built-in's name
        stays the built-in's, and another registered object of that name is replaced, only with ``replace`` (a
        test's variant of a built-in, in this process until ``unregister``)."""
        if name in self._built_in and not replace:
            raise ValueError(f"{self.kind} {name!r} is built in: a built-in's name stays the built-in's")
        kept = self._checked(name, obj)
        if name in self._registered and not replace and self._registered[name] != kept:
            raise ValueError(f"{self.kind} {name!r} is registered already")
        self._registered[name] = kept
        return kept

    def unregister(self, name: str) -> None:
        """Take back what ``register`` added (a test's own, after the test; a built-in it replaced is back); built-ins
        and entry points stay."""
        self._registered.pop(name, None)

    def reread(self) -> None:
        """Forget the entry points read and what was loaded from them: read anew when next needed."""
        self._entry_points = None
        self._broken.clear()
        self._loaded = {name: obj for name, obj in self._loaded.items() if name in self._built_in}

    def _checked(self, name: str, obj: object) -> T:
        return self._check(name, obj) if self._check is not None else obj  # type: ignore[return-value]

    def _built(self, name: str) -> T:
        if name not in self._loaded:
            ref = self._built_in[name]
            self._loaded[name] = self._checked(name, pkgutil.resolve_name(ref) if isinstance(ref, str) else ref)
        return self._loaded[name]

    def _read(self) -> dict[str, metadata.EntryPoint]:
        if self._entry_points is None:
            found: dict[str, metadata.EntryPoint] = {}
            for entry in (metadata.entry_points(group=self.group) if self.group else ()):
                found.setdefault(entry.name, entry)
            self._entry_points = found
        return self._entry_points

    def _load_entry(self, name: str, entry: metadata.EntryPoint) -> None:
        """Load an entry point, or keep the one line that says why it does not load."""
        try:
            self._loaded[name] = self._checked(name, entry.load())
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # noqa: BLE001 - another package's import fails with anything, even exit()
            self._broken[name] = broken_line(self.kind, name, self.group, entry, err)


def broken_line(kind: str, name: str, group: str | None, entry: metadata.EntryPoint, err: BaseException) -> str:
    """The one line that says an entry point does not load: the entry, its distribution and why."""
    dist = entry.dist.name if entry.dist is not None else "an unknown distribution"
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    why = type(err).__name__ + (f": {lines[0][:WHY_CHARS]}" if lines else "")
    return (f"{kind} {name} ({group} entry point {entry.value} of {dist}) does not load ({why}): fix or reinstall "
            f"that package, or choose another {kind}")


def reread_entry_points() -> None:
    """Every registry's entry points read anew when next needed (a test that installed or removed a distribution)."""
    for registry in _ALL:
        registry.reread()
