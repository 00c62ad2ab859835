"""Reading a settings file a user wrote (a task file, a sweep file): ``yaml.safe_load`` within bounds.

YAML aliases let a few hundred bytes stand for millions of values (``&a [x, x]``, ``&b [*a, *a]``, ...):
``safe_load`` builds them as shared objects in no time, but anything that walks the value (a check, an
error quoting it) then walks every copy, for minutes and gigabytes. So the loader counts, while it
composes the document and before any value is built, how many values each alias repeats, and refuses
the file past ``MAX_ALIASED`` of them (a merge key's ``<<: *shared`` repeats a few; a bomb, millions),
as it refuses an alias used inside its own anchor (a value that contains itself). A file is read only
up to ``MAX_BYTES``: settings are short, the data goes in data files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from softeval.errors import UserError, one_line

MAX_BYTES = 1 << 20  # 1 MiB: the largest task or sweep file read
MAX_ALIASED = 10_000  # the most values all of a file's aliases may repeat together


class AliasBound(yaml.YAMLError):
    """A document whose aliases repeat more than ``MAX_ALIASED`` values, or contain themselves."""


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with the alias bound (module docstring)."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._aliased = 0
        self._sizes: dict[int, int] = {}  # id(node) -> values in it, each alias counted as what it repeats
        self._open: set[str] = set()  # anchors whose node is being composed

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) and event.anchor in self.anchors:
            if event.anchor in self._open:
                raise AliasBound(f"the alias *{event.anchor} is used inside its own anchor "
                                 f"(line {event.start_mark.line + 1}): a value cannot contain itself")
            self._aliased += _size(self.anchors[event.anchor], self._sizes)
            if self._aliased > MAX_ALIASED:
                raise AliasBound(f"its aliases repeat more than {MAX_ALIASED} values (at *{event.anchor}, line "
                                 f"{event.start_mark.line + 1}): write the values out, or alias less")
            return super().compose_node(parent, index)
        anchor = getattr(event, "anchor", None)
        if anchor is None:
            return super().compose_node(parent, index)
        self._open.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._open.discard(anchor)


def _size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """The values in ``node``, counting every alias in it as what it stands for (memoised by node)."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    if isinstance(node, yaml.SequenceNode):
        total = 1 + sum(_size(child, sizes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        total = 1 + sum(_size(key, sizes) + _size(value, sizes) for key, value in node.value)
    else:
        total = 1
    sizes[id(node)] = total
    return total


def read_yaml(path: Path, where: str, loader: type[BoundedLoader] = BoundedLoader) -> Any:
    """The value of the YAML (or JSON) file ``path``; every problem is one UserError starting with
    ``where`` (how the caller names the file). ``loader``: BoundedLoader or a subclass of it."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise UserError(f"{where}: {size} bytes is more than the {MAX_BYTES} a settings file may have "
                            "(data goes in a data file)")
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"{where}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise UserError(f"{where}: cannot be read ({err.strerror or err})") from None
    try:
        return yaml.load(text, Loader=loader)
    except AliasBound as err:
        raise UserError(f"{where}: {err}") from None
    except (yaml.YAMLError, RecursionError) as err:
        raise UserError(f"{where}: not valid YAML ({one_line(err)})") from None
