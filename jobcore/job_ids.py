"""Job ids: 32 hex characters, 80 random bits then the millisecond the job was built.

The time at the end is the index of every topic a job's records land in: a reader
that knows only a job id (``JobProducer.result``, ``producer status``, ``leasekeeper
inspect job``) asks Kafka's time index (``offsets_for_times``) where that
millisecond begins in ``jobs.Q.results`` or ``jobs.Q.status`` and reads on from
there, since nothing of a job is written before it was built. So the cost of finding
a job that ended an hour or a week ago is the records written while it waited and
ran, not the hour or the week.

The random part comes first so that the short prefixes people type and tables show
(``leasekeeper inspect job 3f9a1c2e``) stay distinct; an id sorted by time would
share its first characters with every job of the same minute.

An id made elsewhere (another language, or a producer older than this layout) may
end in anything: ``built_at_ms`` trusts its last twelve characters only as a time
inside the window a reader searches anyway, and a reader given no time falls back to
the whole window.
"""

from __future__ import annotations

import secrets
from typing import Final

__all__ = ["ID_CHARS", "SKEW_MS", "built_at_ms", "new_job_id", "search_from_ms"]

ID_CHARS: Final = 32
_TIME_CHARS: Final = 12  # 48 bits of milliseconds: until the year 10889
_RANDOM_BYTES: Final = (ID_CHARS - _TIME_CHARS) // 2
# How far a record's timestamp may precede the time in its job's id: the clocks of the
# producer's host and of the leasekeeper's (which stamps result and status records)
# disagree by this much at most, as NTP keeps hosts within well under a second.
SKEW_MS: Final = 60_000
_HEX: Final = frozenset("0123456789abcdef")


def new_job_id(now_s: float) -> str:
    """A new job id built at ``now_s`` (seconds since the epoch)."""
    return secrets.token_hex(_RANDOM_BYTES) + f"{int(now_s * 1000) & 0xFFFF_FFFF_FFFF:012x}"


def built_at_ms(job_id: str) -> int | None:
    """When ``job_id`` was built, if it has this module's layout (else None)."""
    if len(job_id) != ID_CHARS or not _HEX.issuperset(job_id):
        return None
    return int(job_id[-_TIME_CHARS:], 16)


def search_from_ms(job_id: str, window_from_ms: int, now_ms: int) -> int:
    """Where a reader of a job's records starts: a little before the job was built, when
    its id says so plausibly (inside the window, not in the future); else the window's
    start. Never before the window: older records are gone or outside the search."""
    built = built_at_ms(job_id)
    if built is None or not window_from_ms <= built <= now_ms + SKEW_MS:
        return window_from_ms
    return max(window_from_ms, built - SKEW_MS)
