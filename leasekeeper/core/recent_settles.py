"""The jobs each recent Settle's ``then_claim`` got, by the Settle's id.

Grants are stored before they are sent, so an answer lost on its way (a deadline,
a reset connection) leaves its jobs leased to a worker that never heard of them.
The worker sends that Settle again under the same ``settle_id``; answering it with
a second claim would strand the first one's jobs until their leases expire. The
servicer answers it from here instead: the same grants, or none.

A worker's claim loop sends one Settle at a time and resends only its latest, so
a few ids per worker are enough; workers are forgotten least recently heard from
first, and the remembered jobs' bytes are bounded too (most of them are shared with
the leases they belong to while those last).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from jobcore.config import CLAIM_ANSWER_BYTES
from leasekeeper.core.leases import Grant

IDS_PER_WORKER = 4
WORKERS = 4096
MAX_BYTES = 4 * CLAIM_ANSWER_BYTES


class _Answer:
    """One Settle's id and the grants its claim got (none yet while it is answered)."""

    __slots__ = ("grants", "settle_id", "size")

    def __init__(self, settle_id: str) -> None:
        self.settle_id = settle_id
        self.grants: list[Grant] = []
        self.size = 0


class RecentSettles:
    """Thread-safe: the servicer's threads share one."""

    def __init__(
        self,
        *,
        ids_per_worker: int = IDS_PER_WORKER,
        workers: int = WORKERS,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self._ids_per_worker = max(1, ids_per_worker)
        self._max_workers = max(1, workers)
        self._max_bytes = max_bytes
        self._workers: OrderedDict[str, list[_Answer]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def begin(self, worker: str, settle_id: str) -> list[Grant] | None:
        """None for an id not seen: it is now taken, and ``answered`` records what its
        claim got. For a known id, the grants its first answer carried: empty while
        that answer is still being made, or when it got none."""
        with self._lock:
            answers = self._workers.get(worker)
            if answers is None:
                answers = self._workers[worker] = []
            else:
                self._workers.move_to_end(worker)
                for answer in answers:
                    if answer.settle_id == settle_id:
                        return list(answer.grants)
            answers.append(_Answer(settle_id))
            if len(answers) > self._ids_per_worker:
                self._bytes -= answers.pop(0).size
            self._evict()
            return None

    def answered(self, worker: str, settle_id: str, grants: list[Grant]) -> None:
        """What the claim of ``begin``'s new id got (its grants, as sent)."""
        size = sum(len(g.envelope) + len(g.payload) for g in grants)
        with self._lock:
            for answer in self._workers.get(worker, ()):
                if answer.settle_id == settle_id:
                    self._workers.move_to_end(worker)
                    answer.grants = grants
                    answer.size = size
                    self._bytes += size
                    self._evict()
                    return

    def _evict(self) -> None:
        """Forget the workers heard from least recently, beyond the bounds (never the
        last one: the answer just remembered is the one a resend would ask for)."""
        while len(self._workers) > 1 and (
            len(self._workers) > self._max_workers or self._bytes > self._max_bytes
        ):
            _, answers = self._workers.popitem(last=False)
            self._bytes -= sum(a.size for a in answers)

    def ids(self) -> int:
        """How many ids are remembered (for tests and the bounds)."""
        with self._lock:
            return sum(len(answers) for answers in self._workers.values())

    def size(self) -> int:
        """The remembered jobs' bytes (their records and payloads)."""
        with self._lock:
            return self._bytes
