"""Cancellations and dedupe keys as the leasekeeper knows them (pure, no Kafka).

Both are facts every leasekeeper of a queue must agree on, whichever partition a
job sits in, so they come from small compacted topics read whole (see
``leasekeeper/control_feed.py``); this object is what the engine consults.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jobcore.control import Cancellation, DedupeClaim, dedupe_index_key
from schemas.job import Job


@dataclass(kw_only=True)
class ControlState:
    dedupe_window_ms: int = 24 * 3600 * 1000
    cancelled: dict[str, Cancellation] = field(default_factory=dict)
    claims: dict[bytes, DedupeClaim] = field(default_factory=dict)

    def cancel(self, cancellation: Cancellation) -> None:
        self.cancelled[cancellation.job_id] = cancellation

    def is_cancelled(self, job_id: str) -> bool:
        return job_id in self.cancelled

    def remember(self, claim: DedupeClaim) -> None:
        """A key's first job; an older claim of the same key is kept (first wins)."""
        current = self.claims.get(claim.key)
        if (
            current is None
            or claim.seen_at_ms < current.seen_at_ms
            or self._stale(current, claim.seen_at_ms)
        ):
            self.claims[claim.key] = claim

    def duplicate_of(self, job: Job, now_ms: int) -> str | None:
        """The job id this job duplicates, if its key was claimed by another job within
        the dedupe window; None when it may run. Retries and replays of the same job
        keep their job id, so they are never duplicates of themselves."""
        if job.dedupe_key is None:
            return None
        claim = self.claims.get(dedupe_index_key(job.tenant_id, job.dedupe_key))
        if claim is None or claim.job_id == job.job_id or self._stale(claim, now_ms):
            return None
        return claim.job_id

    def needs_claim(self, job: Job, now_ms: int) -> bool:
        """True for a keyed job whose key is not yet claimed (by itself) in the window."""
        if job.dedupe_key is None:
            return False
        claim = self.claims.get(dedupe_index_key(job.tenant_id, job.dedupe_key))
        return claim is None or self._stale(claim, now_ms)

    def _stale(self, claim: DedupeClaim, now_ms: int) -> bool:
        return now_ms - claim.seen_at_ms > self.dedupe_window_ms
