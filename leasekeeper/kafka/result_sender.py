"""Result records (``jobs.Q.results``) on a producer of their own, with one delivery
report per partition per loop turn instead of one per record.

A result resolves its job's offset, so unlike a status record its delivery must be
heard. Through the outbox that cost a result what it costs a retry copy (an entry, a
closure and a wrapped delivery report per record). Here one result is one
``produce()`` call, and only the last result a turn sends to a partition asks for a
report: an idempotent producer delivers each partition's records in the order they
were produced, so that one report answers for the results before it (its group).
A report per record cost a message object and a turn of the interpreter's lock each:
about a tenth of what a result costs the leasekeeper (BENCHMARKS.md section 16).
The results a poll reports delivered go to the engine together
(``CopyPort.delivered_many``: their offsets resolve as acked, their status records
go out), one lock and one store write for the lot.

What a group's report cannot say is that a record before its last failed while the
last one succeeded. So the producer never gives up on a record for lack of time
(``message.timeout.ms`` 0: it retries a retriable error until it succeeds): the only
failures left are refusals (no such topic, not authorised, a batch the topic will not
take), and a refusal of part of a group ends as a refusal of the whole group does,
the result dropped and the job resolved as acked, so a partition never stalls for a
result. A failed group is handled as one: a transient failure sends the whole group
again after a backoff, the offsets unresolved meanwhile (a record of it that was
written is written twice, under the same job id); any other drops its results
(``on_dropped``).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from functools import partial

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
Header = tuple[str, str | bytes | None]  # as the client takes them


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
        # Produced without a report of their own, per partition: the next record sent
        # there with a report answers for them.
        self._unreported: list[list[CopyRequest]] = [[] for _ in range(RESULTS_PARTITIONS)]
        self._reporting = 0  # results in groups whose report has not come yet
        self._waiting: deque[tuple[float, CopyRequest]] = deque()  # to send again, by due
        self._reported_ok: list[CopyRequest] = []  # delivered, during the current poll
        # The client wants headers as a list: one per content type, built once.
        self._headers: dict[tuple[tuple[str, bytes], ...], list[Header]] = {}
        self._producer = make_producer(
            settings,
            **{
                "linger.ms": LINGER_MS,
                # Small JSON records: compressing them costs both sides CPU (the broker
                # decompresses a batch to validate it) and saves little.
                "compression.type": "none",
                # Never time a record out: a group's one report must answer for every
                # record in it (see the module's docstring).
                "message.timeout.ms": 0,
            },
        )

    def take(self, copies: list[CopyRequest]) -> list[CopyRequest]:
        """Send the result copies among ``copies`` (and any waiting to be sent again);
        return the others, for the outbox."""
        results: list[CopyRequest] = []
        if self._waiting and self._waiting[0][0] <= self._clock():
            now = self._clock()
            while self._waiting and self._waiting[0][0] <= now:
                results.append(self._waiting.popleft()[1])
        others: list[CopyRequest] = []
        for request in copies:
            if request.kind is CopyKind.RESULT:
                results.append(request)
            else:
                others.append(request)
        if results:
            self._send(results)
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

    def _send(self, requests: list[CopyRequest]) -> None:
        by_partition: dict[int, list[tuple[bytes, CopyRequest]]] = {}
        for request in requests:
            key = request.raw_key or b""
            by_partition.setdefault(results_partition(key.decode()), []).append((key, request))
        for partition, keyed in by_partition.items():
            unreported = self._unreported[partition]
            last = len(keyed) - 1
            for index, (key, request) in enumerate(keyed):
                value = request.raw_value or b""
                kind = result_headers(value)
                headers = self._headers.get(kind) or self._headers.setdefault(kind, list(kind))
                try:
                    if index < last:
                        self._producer.produce(self._topic, value, key, partition=partition,
                                               headers=headers)  # fmt: skip
                    else:  # the group's last: its report answers for the group
                        group = [*unreported, request]
                        self._producer.produce(
                            self._topic, value, key, partition=partition, headers=headers,
                            on_delivery=partial(self._reported, group),
                        )  # fmt: skip
                        self._reporting += len(group)
                        unreported.clear()
                        break
                except BufferError:  # the local queue is full: these again once it has room
                    due = self._clock() + RETRY_AFTER_S
                    self._waiting.extend((due, r) for _, r in keyed[index:])
                    break
                unreported.append(request)

    def _reported(self, group: list[CopyRequest], error: KafkaError | None, _: Message) -> None:
        """A group's delivery report (served by ``poll``)."""
        self._reporting -= len(group)
        if error is None:
            self._reported_ok.extend(group)
            return
        failure = classify_produce_error(error)
        if failure is ProduceFailure.TRANSIENT:
            due = self._clock() + RETRY_AFTER_S
            self._waiting.extend((due, request) for request in group)
            return
        why = f"{failure.value}: {self._topic}: {error.name()}: {error.str()}"
        for request in group:
            self._on_dropped(request, why)

    @property
    def in_flight(self) -> int:
        return self._reporting + sum(map(len, self._unreported)) + len(self._waiting)

    def flush(self, timeout_s: float) -> None:
        """On the way out: what is sent is waited for, ``timeout_s`` at most, so the
        jobs it resolves can be committed; what waits to be sent again, or was sent
        without a report of its own and nothing after it, stays unresolved (those jobs
        run again after the restart)."""
        deadline = self._clock() + timeout_s
        while self._clock() < deadline and self._reporting:
            self._poll(min(0.5, max(0.001, deadline - self._clock())))
        if self.in_flight:
            log.warning("%d job results were not written before stopping: their jobs run "
                        "again", self.in_flight)  # fmt: skip
