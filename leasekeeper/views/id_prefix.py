"""Job ids by unique prefix, as git takes commit ids.

A job id is 32 hex characters: too long to type, and a table that cut it would
leave nothing to paste. ``dlq show`` and ``inspect job`` accept the whole id or
any prefix of at least ``MIN_PREFIX`` characters that names exactly one job.
"""

from __future__ import annotations

from collections.abc import Iterable

from jobcore.terminal_text import printable

MIN_PREFIX = 8


class PrefixError(ValueError):
    """The given id names no job, or more than one: the message says which and why."""


def is_prefix_query(given: str) -> bool:
    """True when ``given`` is long enough to be looked up as a prefix."""
    return len(given) >= MIN_PREFIX


def resolve_prefix(candidates: Iterable[str], given: str) -> str | None:
    """The one candidate equal to ``given`` or starting with it; None when none does.

    An exact match wins over longer ids sharing the prefix. Raises PrefixError when
    the prefix is shorter than ``MIN_PREFIX`` or names several jobs.
    """
    ids = set(candidates)
    if given in ids:
        return given
    if not is_prefix_query(given):
        if any(i.startswith(given) for i in ids):
            raise PrefixError(
                f"job id prefix {given!r} is too short: give at least {MIN_PREFIX} characters"
            )
        return None
    matches = sorted(i for i in ids if i.startswith(given))
    if len(matches) > 1:
        # Ids are the producers' text: shown as text, escape sequences included.
        shown = ", ".join(printable(m) for m in matches[:3]) + (" …" if len(matches) > 3 else "")
        raise PrefixError(
            f"job id prefix {given!r} matches {len(matches)} jobs ({shown}): give more characters"
        )
    return matches[0] if matches else None
