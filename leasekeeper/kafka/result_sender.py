"""Result records (``jobs.Q.results``) on a producer of their own, without the outbox's
bookkeeping per copy.

A result resolves its job's offset, so unlike a status record its delivery must be
heard. Through the outbox that cost a result what it costs a retry copy (an entry, a
closure and a wrapped delivery report per record, and a linger meant for urgent
copies): on the drain benchmark, returning 100 bytes made a job cost the leasekeeper
about 75% more CPU. Here one result is one ``produce()`` call with no callback of its
own: the producer's single delivery callback finds the copy a report is about in a
queue per partition, since an idempotent producer reports each partition's records
in the order they were produced. The results a poll reports delivered go
to the engine together (``CopyPort.delivered_many``: their offsets resolve as acked, their
status records go out), one lock and one store write for the lot: per result, that
write and lock were a fifth of the leasekeeper's time on the drain benchmark.

A failure follows the outbox's policy for results: a transient one (librdkafka
already retried it for ``message.timeout.ms``) is sent again after a backoff, the
offset unresolved meanwhile; any other (no such topic, not authorised, too large)
drops the result and resolves the job as acked (``on_dropped``), so a partition
never stalls for a result.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

from jobcore.kafka import (
    KafkaError,
    KafkaSettings,
    Message,
    ProduceFailure,
    classify_produce_error,
    make_producer,
)
from jobcore.results import RESULTS_PARTITIONS, result_headers, results_partition
from leasekeeper.core.copies import CopyKind, CopyRequest

__all__ = ["ResultSender"]

log = logging.getLogger(__name__)

# Results wait this long for company: a caller may be waiting for one, so short, but
# long enough that a busy queue sends each partition's results in batches.
LINGER_MS = 10
RETRY_AFTER_S = 1.0


class ResultSender:
    """Sends the result copies of one queue; used on the Kafka loop's thread only."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        *,
        delivered: Callable[[list[CopyRequest]], None],
        on_dropped: Callable[[CopyRequest, str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._topic = topic
        self._delivered = delivered
        self._on_dropped = on_dropped
        self._clock = clock
        # Produced and not yet reported, per partition, in the order produced.
        self._sent: list[deque[CopyRequest]] = [deque() for _ in range(RESULTS_PARTITIONS)]
        self._waiting: deque[tuple[float, CopyRequest]] = deque()  # to send again, by due
        self._reported_ok: list[CopyRequest] = []  # delivered, during the current poll
        self._producer = make_producer(
            settings,
            **{
                "linger.ms": LINGER_MS,
                # Small JSON records: compressing them costs both sides CPU (the broker
                # decompresses a batch to validate it) and saves little.
                "compression.type": "none",
                "on_delivery": self._reported,
            },
        )

    def take(self, copies: list[CopyRequest]) -> list[CopyRequest]:
        """Send the result copies among ``copies`` (and any waiting to be sent again);
        return the others, for the outbox."""
        if self._waiting and self._waiting[0][0] <= self._clock():
            self._send_waiting()
        others: list[CopyRequest] = []
        for request in copies:
            if request.kind is CopyKind.RESULT:
                self._send(request)
            else:
                others.append(request)
        self._poll(0)
        return others

    def _poll(self, timeout_s: float) -> None:
        """Serve delivery reports, then hand the delivered results over at once."""
        if timeout_s > 0:
            self._producer.flush(timeout_s)
        else:
            self._producer.poll(0)
        if self._reported_ok:
            done, self._reported_ok = self._reported_ok, []
            self._delivered(done)

    def _send(self, request: CopyRequest) -> None:
        key = request.raw_key or b""
        value = request.raw_value or b""
        partition = results_partition(key.decode())
        try:
            self._producer.produce(self._topic, value, key, partition=partition,
                                   headers=list(result_headers(value)))  # fmt: skip
        except BufferError:  # the local queue is full: again once it has room
            self._waiting.append((self._clock() + RETRY_AFTER_S, request))
            return
        self._sent[partition].append(request)

    def _send_waiting(self) -> None:
        now = self._clock()
        while self._waiting and self._waiting[0][0] <= now:
            _, request = self._waiting.popleft()
            self._send(request)

    def _reported(self, error: KafkaError | None, message: Message) -> None:
        """A delivery report (served by ``poll``): the oldest result sent to its
        partition is the one it is about."""
        partition = message.partition()
        sent = self._sent[partition] if partition is not None and 0 <= partition < len(
            self._sent
        ) else None  # fmt: skip
        request = _match(sent, message.key()) if sent else None
        if request is None:
            log.warning("a delivery report for %s matched no result sent", self._topic)
            return
        if error is None:
            self._reported_ok.append(request)
            return
        failure = classify_produce_error(error)
        if failure is ProduceFailure.TRANSIENT:
            self._waiting.append((self._clock() + RETRY_AFTER_S, request))
            return
        self._on_dropped(request, f"{failure.value}: {self._topic}: {error.name()}: {error.str()}")

    @property
    def in_flight(self) -> int:
        return sum(len(q) for q in self._sent) + len(self._waiting)

    def flush(self, timeout_s: float) -> None:
        """On the way out: what is sent is waited for, ``timeout_s`` at most, so the
        jobs it resolves can be committed; what waits to be sent again stays unresolved
        (those jobs run again after the restart)."""
        deadline = self._clock() + timeout_s
        while self._clock() < deadline and any(self._sent):
            self._poll(min(0.5, max(0.001, deadline - self._clock())))
        if self.in_flight:
            log.warning("%d job results were not written before stopping: their jobs run "
                        "again", self.in_flight)  # fmt: skip


def _match(sent: deque[CopyRequest], key: bytes | None) -> CopyRequest | None:
    """The copy a report is about: the partition's oldest (reports come in produce
    order), or, should they ever not, the oldest with the report's key."""
    if sent[0].raw_key == key:
        return sent.popleft()
    for request in sent:
        if request.raw_key == key:
            sent.remove(request)
            return request
    return None
