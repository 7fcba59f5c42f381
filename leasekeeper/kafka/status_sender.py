"""Status records (``jobs.Q.status``) on a producer of their own, reported only on error.

A status record resolves nothing: no offset waits for it, so it needs none of the
outbox's bookkeeping per copy (a CopyRequest, an entry, a delivery report served
in Python, a call back into the engine). On the drain benchmark that bookkeeping made a
status record cost about a third of a no-op job's leasekeeper CPU. Here one
record is one ``produce()`` call: the producer lingers longer (the records are
not urgent, bigger batches are cheaper for the broker too) and reports a
delivery only when it failed (``delivery.report.only.error``), so a drain of
succeeded jobs runs no Python per delivered record.

A failure is handled as before: a transient one (librdkafka already retried it
for ``message.timeout.ms``) is sent again after a backoff; any other (no such
topic, not authorised) drops the record, counted and warned about by the caller.

Records waiting to be sent again are capped (``MAX_WAITING``): when only the
status topic is down (its leader gone, ``min.insync.replicas`` not met there) jobs
go on finishing at full rate, since nothing waits for their status records, and an
unbounded queue would grow by one record a job for as long as the outage lasts.
Past the cap a new record is dropped and counted like a refused one. A plain
status record only tells how a job ended; the job itself is resolved already.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from jobcore.control import JobStatus
from jobcore.kafka import (
    KafkaError,
    KafkaSettings,
    Message,
    ProduceFailure,
    classify_produce_error,
    make_producer,
)

__all__ = ["StatusSender"]

log = logging.getLogger(__name__)

# Status records wait this long for company: one batch per 100 ms at most.
LINGER_MS = 100
RETRY_AFTER_S = 1.0
# Status records kept for a later send at most (about 10 MB of small records).
MAX_WAITING = 100_000


@dataclass(frozen=True, slots=True)
class _Record:
    key: bytes
    value: bytes
    due: float = 0.0


class StatusSender:
    """Sends status records to one topic; used on the Kafka loop's thread only."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        *,
        on_dropped: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self._topic = topic
        self._max_waiting = max_waiting
        self._on_dropped = on_dropped
        self._clock = clock
        self._waiting: deque[_Record] = deque()
        self._producer = make_producer(
            settings,
            **{
                "linger.ms": LINGER_MS,
                # Small JSON records: compressing them costs both sides CPU (the broker
                # decompresses a batch to validate it) and saves little.
                "compression.type": "none",
                "delivery.report.only.error": True,
                "on_delivery": self._reported,
            },
        )

    def send(self, statuses: Iterable[JobStatus]) -> None:
        """Send ``statuses`` (and any earlier ones still waiting, first). One is made
        for every job: straight to ``produce()`` when nothing waits, queued only when
        the local queue is full."""
        if self._waiting:
            for status in statuses:
                self._keep(_Record(status.key, status.encode()))
            self._send()
            return
        produce = self._producer.produce
        topic = self._topic
        rest = iter(statuses)
        for status in rest:
            key = status.key
            value = status.encode()
            try:
                produce(topic, key=key, value=value)
            except BufferError:  # the rest go at the next pump, in order
                self._keep(_Record(key, value))
                for later in rest:
                    self._keep(_Record(later.key, later.encode()))
                break
        self._producer.poll(0)

    def _send(self) -> None:
        now = self._clock()
        while self._waiting and self._waiting[0].due <= now:
            record = self._waiting[0]
            try:
                self._producer.produce(self._topic, key=record.key, value=record.value)
            except BufferError:
                break  # the local queue is full: the rest go at the next pump
            self._waiting.popleft()
        self._producer.poll(0)

    def _reported(self, error: KafkaError | None, message: Message) -> None:
        """A failed delivery (successes are not reported), served by ``poll``."""
        if error is None:
            return
        failure = classify_produce_error(error)
        text = f"{error.name()}: {error.str()}"
        if failure is ProduceFailure.TRANSIENT:
            key, value = message.key(), message.value()
            if key is not None and value is not None:
                self._keep(_Record(key, value, self._clock() + RETRY_AFTER_S))
                return
        self._on_dropped(f"{failure.value}: {self._topic}: {text}")

    def _keep(self, record: _Record) -> None:
        """Queue a record for a later send, or drop it once ``max_waiting`` wait."""
        if len(self._waiting) < self._max_waiting:
            self._waiting.append(record)
            return
        self._on_dropped(
            f"overflow: {self._topic}: {len(self._waiting)} status records wait already "
            "(the status topic is not taking them)"
        )

    @property
    def waiting(self) -> int:
        return len(self._waiting) + len(self._producer)

    def flush(self, timeout_s: float) -> None:
        """On the way out: send what waits and wait for it, ``timeout_s`` at most."""
        deadline = self._clock() + timeout_s
        self._waiting = deque(_Record(r.key, r.value) for r in self._waiting)  # due now
        while self._clock() < deadline and (self._waiting or len(self._producer)):
            self._send()
            self._producer.flush(min(0.5, max(0.0, deadline - self._clock())))
        if self.waiting:
            log.warning("%d job status records were not written before stopping", self.waiting)
