"""How the ``producer`` command line spells a delay (``--delay 10m``) and an instant
(``--at 2030-01-01T09:00:00Z``).

Pure parsing, apart from the CLI so it has its own unit tests. Limits (at most
30 days, never negative) are the enqueue rules' job, not the parser's.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from jobcore.durations import parse_duration

__all__ = ["parse_at", "parse_delay"]


def parse_delay(text: str) -> timedelta:
    """``"90s"``, ``"10m"``, ``"2h"``, ``"3d"``, ``"250ms"``, ``"1.5h"``, or plain seconds
    (``"45"``, ``"2.5"``); ValueError otherwise. The one duration syntax of every
    command (``jobcore.durations``), worded as a delay."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ValueError(str(exc).replace("invalid duration", "invalid delay", 1)) from None


def parse_at(text: str) -> datetime:
    """An ISO 8601 instant with its offset (``Z`` for UTC allowed); ValueError for a
    malformed one or one without an offset, which would mean a different instant
    on machines in different zones."""
    try:
        instant = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"invalid time {text!r}: ISO 8601 with an offset, e.g. 2030-01-01T09:00:00Z "
            "or 2030-01-01T10:00:00+01:00"
        ) from None
    if instant.utcoffset() is None:
        raise ValueError(
            f"time {text!r} has no offset: add Z (UTC) or +HH:MM, e.g. 2030-01-01T09:00:00Z"
        )
    return instant
