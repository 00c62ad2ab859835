"""Value rules every layer shares: what counts as a whole number, a number, a data file. Pure
functions of a value; the checks of a run's options are in run/validate.py."""

from __future__ import annotations


def is_whole(value) -> bool:
    """An int that is not a bool (``True`` is an int to isinstance, and JSON's true reads as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    """An int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_data_file(source: str) -> bool:
    """Whether a --source names a local data file (anything but offline, hub and hub:CONFIG)."""
    return source not in ("offline", "hub") and not source.startswith("hub:")
