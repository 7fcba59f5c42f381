"""Batches settlements: one Settle call per ~5 ms or per full batch, whichever comes first.

Batching is what lets one leasekeeper serve thousands of jobs a second (one
round trip per job caps out near a thousand). The delay it adds is a few
milliseconds on a job's settle, never on its run.

While the worker has room (``relaxed`` says so: half its leases free), nothing
waits for the slots a settle frees, and a batch waits up to ``relaxed_interval_s``
instead: a Settle costs both processes about a millisecond of CPU whatever it
carries, and at a few hundred jobs a second the 5 ms batches carried a handful
each. ``hurry()`` (the worker calls it when a claim leaves it short of room)
sends the waiting batch at the usual interval.

The worker's claim loop sends settlements too: it ``take()``s what waits and
settles it in the call that claims the slots' next jobs (``settle_and_claim``).
While it is about to (``taker_waiting``), a full batch here waits out the interval
instead of going at once, so the two do not race for the same batch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

from schemas.lease_answer import LeaseAnswer
from workers.client import LeaseKeeperRejected, LeaseKeeperUnavailable
from workers.messages import WorkerSettlement

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long a batch may wait while the worker has room (see the module docstring).
RELAXED_INTERVAL_S = 0.05

# Called once per item batch: the items and the leasekeeper's results, or None
# when the call failed and the batch was dropped.
AnswerCallback = Callable[[Sequence[tuple[WorkerSettlement, T]], list[LeaseAnswer] | None], None]


class SettleClient(Protocol):
    """The one call the batcher needs (``LeaseKeeperClient`` has it)."""

    def settle(self, settlements: Sequence[WorkerSettlement], /) -> list[LeaseAnswer]: ...


class SettleBatcher(Generic[T]):
    """A thread that sends queued settlements in batches; ``T`` tags each item for the callback."""

    def __init__(
        self,
        client: SettleClient,
        on_answer: AnswerCallback[T],
        *,
        interval_s: float = 0.005,
        max_batch: int = 100,
        retry_window_s: float = 30.0,
        retry_later_s: float = 0.2,
        retry_later_window_s: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
        relaxed: Callable[[], bool] | None = None,
        relaxed_interval_s: float = RELAXED_INTERVAL_S,
        taker_waiting: Callable[[], bool] | None = None,
    ) -> None:
        self._client = client
        self._taker_waiting = taker_waiting
        self._relaxed = relaxed
        self._relaxed_interval_s = max(interval_s, relaxed_interval_s)
        self._hurried = False
        # The waiting batch is past the usual interval, waiting on the relaxed one: only
        # then does a hurry need to wake the thread.
        self._relaxing = False
        self._retry_window_s = retry_window_s
        self._retry_later_s = retry_later_s
        self._retry_later_window_s = retry_later_window_s
        self._on_answer = on_answer
        self._interval_s = interval_s
        self._max_batch = max_batch
        self._clock = clock
        self._cond = threading.Condition()
        self._items: list[tuple[WorkerSettlement, T]] = []
        self._closing = False
        self._settler = threading.Thread(target=self._run, name="worker-settle", daemon=True)

    def start(self) -> None:
        self._settler.start()

    def put(self, settlement: WorkerSettlement, tag: T) -> None:
        with self._cond:
            self._items.append((settlement, tag))
            if len(self._items) == 1 or len(self._items) >= self._max_batch:
                self._cond.notify_all()

    def hurry(self) -> None:
        """The worker is short of room: the waiting batch goes at the usual interval.
        The thread is woken only when that interval is over already (the batch waits on
        the relaxed one); otherwise it reads the flag when its wait ends. A worker that
        is short of room hurries after every claim, and each needless wake-up was two
        thread switches (a fifth of a draining worker's CPU samples)."""
        with self._cond:
            if not self._hurried:
                self._hurried = True
                if self._relaxing:
                    self._cond.notify_all()

    def take(self) -> list[tuple[WorkerSettlement, T]]:
        """The waiting settlements (a batch at most), for a caller that sends them in a
        call of its own (the worker's settle-and-claim); none once closing."""
        with self._cond:
            if self._closing:
                return []
            batch = self._items[: self._max_batch]
            del self._items[: self._max_batch]
            return batch

    def give_back(self, items: Sequence[tuple[WorkerSettlement, T]]) -> None:
        """Settlements a taker could not send: this thread sends them, first, with its
        retries."""
        if items:
            with self._cond:
                self._items[:0] = items
                self._cond.notify_all()

    def answered(
        self, items: Sequence[tuple[WorkerSettlement, T]], results: list[LeaseAnswer]
    ) -> None:
        """The answers to a taker's call: the callback hears of each, but those to send
        again later (a restarted leasekeeper had not re-read them) come back here."""
        later = {r.lease_id for r in results if r.retry_later}
        self._answer([item for item in items if item[0].ref.lease_id not in later], results)
        self.give_back([item for item in items if item[0].ref.lease_id in later])

    def close(self, timeout: float) -> None:
        """Send what is queued, then stop; gives up after ``timeout`` seconds."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._settler.is_alive():
            self._settler.join(timeout)
        if self._settler.is_alive():
            log.warning("settle thread still sending after %.1fs; abandoning it", timeout)

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._send(batch)

    def _settle_with_retries(self, settlements: list[WorkerSettlement]) -> list[LeaseAnswer]:
        """Keep trying while the leasekeeper is away (a restart on the same disk keeps
        its leases, so an ack that arrives once it is back still counts and the job
        does not run twice); give up after ``retry_window_s``."""
        give_up_at = self._clock() + self._retry_window_s
        while True:
            try:
                return self._client.settle(settlements)
            except LeaseKeeperUnavailable:
                if self._clock() >= give_up_at:
                    raise
                with self._cond:
                    if self._cond.wait_for(lambda: self._closing, timeout=0.05):
                        raise

    def _next_batch(self) -> list[tuple[WorkerSettlement, T]] | None:
        with self._cond:
            self._cond.wait_for(lambda: bool(self._items) or self._closing)
            if not self._items:
                return None
            first_at = self._clock()
            flush_at = first_at + self._interval_s
            while not self._closing and (len(self._items) < self._max_batch or self._deferred()):
                if self._hurried:
                    flush_at = min(flush_at, first_at + self._interval_s)
                remaining = flush_at - self._clock()
                if remaining <= 0:
                    if self._may_wait_longer(flush_at, first_at):
                        flush_at = first_at + self._relaxed_interval_s
                        self._relaxing = True
                        continue
                    break
                self._cond.wait(remaining)
            self._hurried = self._relaxing = False
            batch = self._items[: self._max_batch]
            del self._items[: self._max_batch]
            return batch

    def _deferred(self) -> bool:
        """A full batch waits (up to the interval) while a taker is about to take it."""
        return self._taker_waiting is not None and self._taker_waiting()

    def _may_wait_longer(self, flush_at: float, first_at: float) -> bool:
        """At the usual interval: whether the batch may wait on, the worker having room."""
        if self._hurried or self._relaxed is None:
            return False
        return flush_at < first_at + self._relaxed_interval_s and self._relaxed()

    def _send(self, batch: list[tuple[WorkerSettlement, T]]) -> None:
        """Send a batch; settlements answered "retry later" (a restarted leasekeeper
        that has not re-read their leases yet) are sent again every ``retry_later_s``,
        together with whatever was queued meanwhile, so they never hold other acks
        back. Closing does not cut this short, since dropping such an ack runs the
        job twice; each gives up after ``retry_later_window_s`` with its last answer."""
        first_later: dict[str, float] = {}
        pending = batch
        while pending:
            try:
                results = self._settle_with_retries([settlement for settlement, _ in pending])
            except (LeaseKeeperUnavailable, LeaseKeeperRejected) as exc:
                log.warning(
                    "dropped %d settlement(s); the leasekeeper will redeliver those jobs: %s",
                    len(pending),
                    exc,
                )
                self._answer(pending, None)
                return
            except Exception:
                log.exception("dropped %d settlement(s) after an unexpected error", len(pending))
                self._answer(pending, None)
                return
            later = self._to_send_again(pending, results, first_later)
            self._answer([item for item in pending if item not in later], results)
            if not later:
                return
            with self._cond:
                self._cond.wait_for(lambda: False, timeout=self._retry_later_s)
                fresh = self._items[: self._max_batch]
                del self._items[: self._max_batch]
            pending = later + fresh

    def _to_send_again(
        self,
        pending: list[tuple[WorkerSettlement, T]],
        results: list[LeaseAnswer],
        first_later: dict[str, float],
    ) -> list[tuple[WorkerSettlement, T]]:
        now = self._clock()
        later_ids = {r.lease_id for r in results if r.retry_later}
        again = []
        for item in pending:
            lease_id = item[0].ref.lease_id
            if lease_id in later_ids:
                since = first_later.setdefault(lease_id, now)
                if now - since < self._retry_later_window_s:
                    again.append(item)
        return again

    def _answer(
        self, items: Sequence[tuple[WorkerSettlement, T]], results: list[LeaseAnswer] | None
    ) -> None:
        if not items:
            return
        try:
            self._on_answer(items, results)
        except Exception:
            log.exception("settle callback failed")
