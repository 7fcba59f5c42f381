"""How the ``producer`` command line spells a delay (``--delay 10m``) and an instant
(``--at 2030-01-01T09:00:00Z``).

Pure parsing, apart from the CLI so it has its own unit tests. Limits (at most
30 days, never negative) are the enqueue rules' job, not the parser's.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

__all__ = ["parse_at", "parse_delay"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DELAY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)?$")


def parse_delay(text: str) -> timedelta:
    """``"90s"``, ``"10m"``, ``"2h"``, ``"3d"``, ``"250ms"``, ``"1.5h"``, or plain seconds
    (``"45"``, ``"2.5"``); ValueError otherwise."""
    match = _DELAY.match(text.strip())
    if match is None:
        raise ValueError(
            f"invalid delay {text!r}: seconds (e.g. 90) or a number and a unit "
            "(ms, s, m, h, d), e.g. 90s, 10m, 2h, 3d"
        )
    number, unit = match.groups()
    return timedelta(seconds=float(number) * _UNITS[unit or "s"])


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
