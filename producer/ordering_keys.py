"""The producer's side of "a key belongs to one priority class".

An ordering key's line lives in one class topic (the key is scoped to queue and
tenant, so its jobs share that topic's partition); a job with the same key in
another class would sit in another topic, outside the line, and could run
before the jobs ahead of it. This check refuses such a job before it is sent.

It sees only this producer's own jobs (the keys it enqueued, up to
``REMEMBERED`` of them, least recently used forgotten first): another process
enqueuing the same key in another class is not seen here. The leasekeeper checks
again with what it holds (``leasekeeper.ordering.keys``: keys in its window and its
blocked keys) and dead-letters the stray job with the reason
``ordering_class_conflict``; see docs/ordering.md.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from schemas.job import Job

# As many as the other maps keyed by tenant or key keep beyond their active entries.
REMEMBERED = 10_000


class KeyClasses:
    """Which class each recently enqueued ordering key went to; thread-safe."""

    def __init__(self, limit: int = REMEMBERED) -> None:
        self._limit = limit
        self._classes: OrderedDict[tuple[str, str, str], str] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, job: Job) -> None:
        """Remember ``job``'s key in its class; ValueError if the key is in another."""
        if job.ordering_key is None:
            return
        scope = (job.queue, job.tenant_id, job.ordering_key)
        with self._lock:
            known = self._classes.get(scope)
            if known is not None and known != job.priority_class:
                raise ValueError(
                    f"ordering key {job.ordering_key!r} (queue {job.queue!r}, tenant "
                    f"{job.tenant_id!r}) is in priority class {known!r}, not "
                    f"{job.priority_class!r}: a key belongs to one class; enqueue it with "
                    f"priority {known!r}, or use another key"
                )
            self._classes[scope] = job.priority_class
            self._classes.move_to_end(scope)
            if len(self._classes) > self._limit:
                self._classes.popitem(last=False)
