"""Typed views as JSON-ready data, by one rule, at the edge where they leave the process.

``inspect``'s answer, the dashboard's JSON, the outbox's reports and the metrics all
start from frozen dataclasses. Each used to write its own ``to_dict``; a field added to
a view then had to be added there too, or it was missing in one reader and present in
another. ``plain`` turns any of them into dicts, lists and scalars:

- a dataclass: its fields in order, each turned the same way. A field's metadata can
  rename it (``{"key": "type"}``), leave it out while it is None (``{"omit_none":
  True}``), round a float (``{"round": 3}``), or lift a nested view's fields into this
  one (``{"flatten": True}``): the shapes the readers already rely on;
- an enum: its value; a datetime: ISO 8601; a mapping: a dict; a tuple, list or set:
  a list; anything else as it is.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

__all__ = ["FLATTEN", "OMIT_NONE", "plain", "plain_dict", "renamed", "rounded"]

# Field metadata, spelled once: ``field(metadata=OMIT_NONE)`` and so on.
OMIT_NONE: Mapping[str, object] = {"omit_none": True}
FLATTEN: Mapping[str, object] = {"flatten": True}


def renamed(key: str) -> Mapping[str, object]:
    """Metadata of a field shown under another name (a Python keyword, a wire name)."""
    return {"key": key}


def rounded(digits: int) -> Mapping[str, object]:
    """Metadata of a float shown to ``digits`` decimals."""
    return {"round": digits}


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data (see the module docstring)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain_dict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(item) for item in value]
    return value


def plain_dict(view: Any) -> dict[str, Any]:
    """A dataclass instance's fields as a dict, by the rules of ``plain``."""
    found: dict[str, Any] = {}
    for f in dataclasses.fields(view):
        item = getattr(view, f.name)
        meta = f.metadata
        if item is None and meta.get("omit_none"):
            continue
        if meta.get("flatten"):
            found.update(plain_dict(item))
            continue
        digits = meta.get("round")
        if digits is not None and isinstance(item, float):
            item = round(item, digits)
        found[meta.get("key", f.name)] = plain(item)
    return found
