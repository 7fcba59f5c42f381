"""Cancellations and dedupe keys as the leasekeeper knows them (pure, no Kafka).

Both are facts every leasekeeper of a queue must agree on, whichever partition a
job sits in, so they come from small compacted topics read whole (see
``leasekeeper/kafka/control_feed.py``); this object is what the engine consults.

Memory stays bounded: a dedupe claim older than the dedupe window and a
cancellation older than the control topics' retention can no longer change a
decision (a stale claim is ignored anyway; the topic itself drops an old
cancellation, so a restarted leasekeeper would not know it either), so
``prune`` drops them, and a tombstone (a record without a value) removes its key.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from jobcore.control import Cancellation, DedupeClaim, dedupe_index_key
from schemas.job import Job
from schemas.job_headers import JobHead

# The control topics' retention (jobcore/topic_admin.py): the longest delay plus 5 days.
CANCEL_RETENTION_MS = 35 * 24 * 3600 * 1000

_K = TypeVar("_K")
_V = TypeVar("_V")


@dataclass(kw_only=True)
class ControlState:
    dedupe_window_ms: int = 24 * 3600 * 1000
    cancel_retention_ms: int = CANCEL_RETENTION_MS
    # Insertion order is arrival order (a replaced entry moves to the end), so
    # pruning walks from the oldest and stops at the first entry still needed.
    cancelled: dict[str, Cancellation] = field(default_factory=dict)
    claims: dict[bytes, DedupeClaim] = field(default_factory=dict)
    pruned: int = 0
    # Job ids cancelled since the engine last looked: it answers for those it holds.
    fresh: list[str] = field(default_factory=list)
    # Writers are the Kafka loop and the engine; readers only use ``get`` and ``in``.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def cancel(self, cancellation: Cancellation, now_ms: int | None = None) -> None:
        """Remember a cancellation, unless it is already past its retention at ``now_ms``."""
        if now_ms is not None and self._expired(cancellation, now_ms):
            return
        with self._lock:
            self.cancelled.pop(cancellation.job_id, None)
            self.cancelled[cancellation.job_id] = cancellation
            self.fresh.append(cancellation.job_id)

    def take_fresh(self) -> list[str]:
        """Job ids cancelled since the last call."""
        with self._lock:
            taken, self.fresh = self.fresh, []
            return taken

    def uncancel(self, job_id: str) -> None:
        """A tombstone on the control topic: the cancellation no longer holds."""
        with self._lock:
            self.cancelled.pop(job_id, None)

    def is_cancelled(self, job_id: str) -> bool:
        return job_id in self.cancelled

    def remember(self, claim: DedupeClaim, now_ms: int | None = None) -> None:
        """A key's first job; an older claim of the same key is kept (first wins).
        A claim already past the window at ``now_ms`` is not kept at all."""
        if now_ms is not None and self._stale(claim, now_ms):
            return
        with self._lock:
            current = self.claims.get(claim.key)
            if (
                current is None
                or claim.seen_at_ms < current.seen_at_ms
                or self._stale(current, claim.seen_at_ms)
            ):
                self.claims.pop(claim.key, None)
                self.claims[claim.key] = claim

    def forget_claim(self, key: bytes) -> None:
        """A tombstone on the dedupe topic: the key may be used again."""
        with self._lock:
            self.claims.pop(key, None)

    def prune(self, now_ms: int) -> int:
        """Drop claims past the dedupe window and cancellations past their retention,
        oldest first; returns how many. Cheap when nothing is due: it stops at the
        first entry still needed."""
        with self._lock:
            dropped = _drop_oldest(self.claims, lambda c: self._stale(c, now_ms))
            dropped += _drop_oldest(self.cancelled, lambda c: self._expired(c, now_ms))
            self.pruned += dropped
        return dropped

    def sizes(self) -> tuple[int, int]:
        """(cancellations, dedupe claims) held in memory."""
        return len(self.cancelled), len(self.claims)

    def duplicate_of(self, job: JobHead | Job, now_ms: int) -> str | None:
        """The job id this job duplicates, if its key was claimed by another job within
        the dedupe window; None when it may run. Retries and replays of the same job
        keep their job id, so they are never duplicates of themselves."""
        if job.dedupe_key is None:
            return None
        claim = self.claims.get(dedupe_index_key(job.tenant_id, job.dedupe_key))
        if claim is None or claim.job_id == job.job_id or self._stale(claim, now_ms):
            return None
        return claim.job_id

    def needs_claim(self, job: JobHead | Job, now_ms: int) -> bool:
        """True for a keyed job whose key is not yet claimed (by itself) in the window."""
        if job.dedupe_key is None:
            return False
        claim = self.claims.get(dedupe_index_key(job.tenant_id, job.dedupe_key))
        return claim is None or self._stale(claim, now_ms)

    def _stale(self, claim: DedupeClaim, now_ms: int) -> bool:
        return now_ms - claim.seen_at_ms > self.dedupe_window_ms

    def _expired(self, cancellation: Cancellation, now_ms: int) -> bool:
        return now_ms - cancellation.cancelled_at_ms > self.cancel_retention_ms


def _drop_oldest(entries: dict[_K, _V], due: Callable[[_V], bool]) -> int:
    """Delete the leading run of ``entries`` (in insertion order) that is ``due``."""
    keys = [key for key, _ in itertools.takewhile(lambda kv: due(kv[1]), entries.items())]
    for key in keys:
        del entries[key]
    return len(keys)
