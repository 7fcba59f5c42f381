"""The resolved-job-id window: skip a copy of a job that already ended here.

A job can reach Kafka twice with the same id: a relay killed between producing a
row and deleting it sends the row again; a leasekeeper that died after a retry
copy was durable but before its commit passed the original runs the original
again, which makes a second retry copy. Once one copy of the job succeeded, the
others are waste, or worse, a second run. So the leasekeeper remembers the ids of
the jobs acked here for a while, and skips a later copy of one of them at intake,
resolving its offset as skipped.

- **Only success counts.** A retry, a hop or a parked job is the same job going
  on under the same id; its copies are never skipped. A dead-lettered job is not
  remembered: a replay from the DLQ keeps its id, and the fields the leasekeeper
  reads of a record (its headers) cannot tell a replay from a copy.
- **A user's dedupe key is not touched.** Dedupe keys are checked first and keep
  their own window (``--dedupe-window``); this window only answers "did this very
  job already end here?".
- **Bounded memory.** At most ``max_ids`` ids (the recent-keys limit every map keyed
  by job id keeps, 10,000, about 2 MB), each for ``window_s`` (10 minutes); the
  oldest go first. A copy comes seconds after its job ended (a relay sending a row
  again on restart), well inside 10,000 acks at the design peak of 2,300 jobs/s.
- **Where it lives.** In the leasekeeper's memory. It does not survive a restart,
  and a partition's next owner does not know what the last one resolved: a copy
  arriving after a restart or a move runs again, as any duplicate did before.
  A copy fetched while the first is still waiting or running is not skipped
  either: only an end that happened is known.
"""

from __future__ import annotations

from collections import deque

from leasekeeper.core.recent import RECENT_LIMIT

__all__ = ["DEFAULT_MAX_IDS", "DEFAULT_WINDOW_S", "ResolvedIds"]

DEFAULT_MAX_IDS = RECENT_LIMIT
DEFAULT_WINDOW_S = 600.0


class ResolvedIds:
    """Job id → when it was acked here (epoch ms), oldest first. Not thread-safe: the
    engine calls it under its lock. Times are passed in.

    A dict and a deque of (time, id) in the order the ids ended, not an
    ``OrderedDict``: every job asks the oldest entry's time, and reading the
    front of a deque makes no iterator. An id that ends again leaves its older
    entry behind, skipped when it comes to the front; the deque is what is capped,
    so those stale entries count against ``max_ids`` too."""

    def __init__(
        self, *, max_ids: int = DEFAULT_MAX_IDS, window_s: float = DEFAULT_WINDOW_S
    ) -> None:
        if max_ids < 0 or window_s < 0:
            raise ValueError(f"max_ids and window_s must be >= 0, got {max_ids}, {window_s}")
        self._max_ids = max_ids
        self._window_ms = round(window_s * 1000)
        self._ended: dict[str, int] = {}
        self._order: deque[tuple[int, str]] = deque()

    def __len__(self) -> int:
        return len(self._ended)

    def ended(self, job_id: str, at_ms: int) -> None:
        """Job ``job_id`` succeeded here at ``at_ms``."""
        if self._max_ids == 0:
            return
        self._ended[job_id] = at_ms
        self._order.append((at_ms, job_id))
        while len(self._order) > self._max_ids:
            self._drop_oldest()

    def already_ended(self, job_id: str, now_ms: int) -> bool:
        """Whether job ``job_id`` succeeded here within the window."""
        if not self._ended:
            return False
        self._forget_before(now_ms - self._window_ms)
        return job_id in self._ended

    def _forget_before(self, cutoff_ms: int) -> None:
        """Drop the ids that ended before ``cutoff_ms``: kept in the order they ended,
        so only the oldest are looked at."""
        order = self._order
        while order and order[0][0] < cutoff_ms:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        at_ms, job_id = self._order.popleft()
        if self._ended.get(job_id) == at_ms:  # else it ended again since: a later entry
            del self._ended[job_id]
