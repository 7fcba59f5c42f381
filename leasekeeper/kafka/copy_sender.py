"""The one sender of durable copies, with one failure policy.

The engine queues ``CopyRequest`` values from any thread; the Kafka loop calls
``pump()`` on its own thread, which takes them, produces them, and acts on each
outcome, whether ``produce()`` refused the record at once or its delivery report
failed later:

- delivered: the engine resolves the source offset (or lets a claimed job run);
- transient (timeouts, a full local queue, no leader): sent again after a
  capped exponential backoff; the offset stays unresolved meanwhile;
- too large: rebuilt smaller and sent at once, first as a dead letter with a
  short history, then as one without the payload; the offset resolves as dead.
  Not an ordered job's ordering-lane copy: it was never a failure, so the job
  stays in its line in the leasekeeper instead (see docs/ordering.md);
- a rebuild that needs a schema the registry cannot give now (``SchemaUnavailable``):
  backed off like a transient failure, never dead-lettered raw for it;
- a result refused (not authorised, unknown topic, too large): dropped with a warning,
  the job resolved as acked (``leasekeeper/core/results.py``);
- blocked (not authorised, unknown topic, fatal): never resolved. The partition
  stops (its commit cannot pass the offset and the loop pauses its fetching),
  one ERROR log and the ``blocked`` view raise the alert, and the copy is retried
  with backoff until it goes through.

A copy counts in the engine's ``in_flight`` from the moment it is decided until
it is delivered or dropped (its partition moved), so drains wait for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from jobcore.kafka import ProduceError, ProduceFailure, Producer, produce_once
from leasekeeper.core.copies import CopyKind, CopyRequest, Shrink
from leasekeeper.core.copy_port import CopyPort
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.log_lines import RateLimit, copy_line
from leasekeeper.kafka.result_sender import ResultSender
from leasekeeper.kafka.router import KafkaRouter
from leasekeeper.kafka.status_sender import StatusSender
from leasekeeper.ordering.lane import LaneUnavailable
from leasekeeper.views.snapshots import BlockedCopy, OutboxView
from schemas.confluent import SchemaUnavailable

log = logging.getLogger(__name__)

# A copy home waiting this many tries for its job from the ordering lane is logged.
LANE_WAIT_WARN_AFTER = 5


@dataclass(frozen=True, kw_only=True)
class OutboxConfig:
    backoff_base_s: float = 0.1
    backoff_max_s: float = 5.0


@dataclass(kw_only=True)
class _Entry:
    """A copy on its way; mutable, and touched only on the loop's thread."""

    request: CopyRequest
    shrink: Shrink = Shrink.FULL
    attempts: int = 0  # failed sends that needed a backoff
    due: float = 0.0
    topic: str = ""  # where the last send went
    offset: int = -1  # where the copy landed, once delivered
    blocked: str = ""  # why the copy cannot be sent, while it cannot


class CopySender:
    def __init__(
        self,
        *,
        producer: Producer,
        copies: CopyPort,
        router: KafkaRouter,
        config: OutboxConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        status: Callable[[Callable[[str], None]], StatusSender] | None = None,
        results: Callable[[Callable[[CopyRequest, str], None]], ResultSender] | None = None,
    ) -> None:
        self._producer = producer
        self._copies = copies
        self._router = router
        self._config = config or OutboxConfig()
        self._clock = clock
        self._waiting: list[_Entry] = []
        self._in_flight = 0
        self._counters = {
            "delivered": 0,
            "transient_failures": 0,
            "shrunk": 0,
            "blocked_events": 0,
            "status_dropped": 0,
            "results_dropped": 0,
            "schema_waits": 0,
            "lane_waits": 0,
        }
        self._status_warned_at = float("-inf")
        self._result_warned_at = float("-inf")
        self._schema_warned_at = float("-inf")
        self._view_lock = threading.Lock()
        self._view = OutboxView()
        self._told = RateLimit(clock=clock)
        # Status records on their own producer (built with the drop handler); without
        # it they take the general path below, with a delivery report each.
        self._status = status(self._drop_status) if status is not None else None
        # Result records likewise (built with the drop handler); without it, as copies.
        self._results = results(self._drop_result) if results is not None else None

    def pump(self) -> None:
        """Send every copy that is due; called on each turn of the Kafka loop."""
        now = self._clock()
        copies = self._copies.take()
        if self._results is not None:
            copies = self._results.take(copies)
        statuses = self._copies.take_statuses()
        if self._status is not None:
            self._status.send(statuses)
        else:
            copies.extend(self._router.status_copy(status) for status in statuses)
        self._waiting.extend(_Entry(request=r, due=now) for r in copies)
        due = [e for e in self._waiting if e.due <= now]
        self._waiting = [e for e in self._waiting if e.due > now]
        for index, entry in enumerate(due):
            if not self._send(entry, now):
                self._waiting.extend(due[index + 1 :])  # the local queue is full
                break
        self._publish()

    def flush_records(self, timeout_s: float) -> None:
        """On the way out: the result and status records still waiting are written, if
        they can be (results first: their jobs' status records follow their delivery)."""
        if self._results is not None:
            self._results.flush(timeout_s)
            self.pump()
        if self._status is not None:
            self._status.flush(timeout_s)

    def blocked(self) -> dict[TopicPart, str]:
        """Partitions that cannot progress until an operator fixes a topic or an ACL."""
        return {e.request.source: e.blocked for e in self._waiting if e.blocked}

    def view(self) -> OutboxView:
        with self._view_lock:
            return self._view

    def _send(self, entry: _Entry, now: float) -> bool:
        """Produce one copy; False when the producer's queue is full (stop for now)."""
        request = entry.request
        if not self._copies.is_current(request):
            self._copies.dropped(request)  # moved: the next owner runs the job again
            return True
        try:
            record = self._router.record(request, entry.shrink)
        except SchemaUnavailable as exc:
            self._schema_wait(entry, str(exc), now)
            return True
        except LaneUnavailable as exc:
            self._lane_wait(entry, str(exc), now)
            return True
        entry.topic = record.topic
        try:
            produce_once(
                self._producer,
                record.topic,
                key=record.key,
                value=record.value,
                headers=list(record.headers),
                on_delivery=lambda failure, text: self._delivered(entry, failure, text),
                partition=record.partition,
                # The overflow lane needs to know where its copies landed (overflow_lane).
                on_offset=_landed(entry) if request.kind is CopyKind.OVERFLOW else None,
            )
        except ProduceError as exc:
            self._failed(entry, exc.failure, str(exc), now=now)
            return exc.failure is not ProduceFailure.TRANSIENT
        self._in_flight += 1
        return True

    def _delivered(self, entry: _Entry, failure: ProduceFailure | None, text: str) -> None:
        """A delivery report (served by ``producer.poll`` on the loop's thread)."""
        self._in_flight -= 1
        if failure is not None:
            self._failed(entry, failure, text, now=self._clock())
            return
        if entry.blocked:
            log.warning("%s delivered: partition %s moves again", entry.request.describe,
                        _name(entry.request.source))  # fmt: skip
        self._counters["delivered"] += 1
        self._tell(entry)
        self._copies.delivered(entry.request, dead=entry.shrink is not Shrink.FULL, at=entry.offset)

    def _tell(self, entry: _Entry) -> None:
        """Log a retry or a dead letter at INFO once it is durable, a few a minute at most."""
        line = copy_line(entry.request, entry.topic)
        if line is None:
            return
        allowance = self._told.allow()
        if allowance.log:
            held = f" ({allowance.suppressed} more not logged)" if allowance.suppressed else ""
            log.info("%s%s", line, held)

    def _failed(self, entry: _Entry, failure: ProduceFailure, text: str, *, now: float) -> None:
        """The one failure policy: shrink what is too large, back off from the rest."""
        topic = entry.topic
        if entry.request.kind is CopyKind.STATUS and failure is not ProduceFailure.TRANSIENT:
            self._drop_status(f"{failure.value}: {topic}: {text}")
            return
        if entry.request.kind is CopyKind.RESULT and failure is not ProduceFailure.TRANSIENT:
            self._drop_result(entry.request, f"{failure.value}: {topic}: {text}")
            return
        if failure is ProduceFailure.TOO_LARGE and entry.request.kind is CopyKind.LANE:
            # Nothing was written: reported as "dead" so that the ordering gate keeps
            # the job in its line, unresolved (never a dead letter for it).
            log.warning("%s too large for %s (%s): it waits in its partition instead",
                        entry.request.describe, topic, text)  # fmt: skip
            self._copies.delivered(entry.request, dead=True)
            return
        if failure is ProduceFailure.TOO_LARGE and _can_shrink(entry):
            entry.shrink = Shrink(entry.shrink + 1)
            entry.due = now
            self._counters["shrunk"] += 1
            log.warning("%s too large for %s (%s): dead-lettering it smaller (%s)",
                        entry.request.describe, topic, text, entry.shrink.name)  # fmt: skip
        elif failure is ProduceFailure.TRANSIENT:
            self._back_off(entry, now)
            self._counters["transient_failures"] += 1
            # Once per copy at WARNING: a broker outage must not flood the log.
            level = logging.WARNING if entry.attempts == 1 else logging.DEBUG
            log.log(level, "%s to %s failed, retrying with backoff: %s",
                    entry.request.describe, topic, text)  # fmt: skip
        else:
            self._block(entry, f"{failure.value}: {topic}: {text}", now)
        self._waiting.append(entry)

    def _schema_wait(self, entry: _Entry, reason: str, now: float) -> None:
        """The copy's record needs the envelope decoded, and the registry cannot give its
        schema now: tried again after a backoff. Warned at most once a minute."""
        self._put_off(entry, "schema_waits", now)
        if now - self._schema_warned_at >= 60:
            self._schema_warned_at = now
            log.warning("%s waits for its envelope's schema, retrying with backoff (the "
                        "Schema Registry does not answer): %s",
                        entry.request.describe, reason)  # fmt: skip

    def _lane_wait(self, entry: _Entry, reason: str, now: float) -> None:
        """A held ordered job's copy home needs its job read back from the ordering lane,
        which cannot give it now: tried again after a backoff (its line waits; the job is
        in the lane meanwhile). Logged at WARNING past the first few tries only: its own
        record just written and not read back yet is the usual, harmless case."""
        self._put_off(entry, "lane_waits", now)
        level = logging.WARNING if entry.attempts == LANE_WAIT_WARN_AFTER else logging.DEBUG
        log.log(level, "%s waits for its job from the ordering lane, retrying with "
                "backoff: %s", entry.request.describe, reason)  # fmt: skip

    def _put_off(self, entry: _Entry, counter: str, now: float) -> None:
        """A copy whose record cannot be built yet: built again after a backoff."""
        self._back_off(entry, now)
        self._counters[counter] += 1
        self._waiting.append(entry)

    def _drop_status(self, reason: str) -> None:
        """A status record that cannot be produced is dropped, never blocks a partition:
        it only tells ``producer cancel`` how a job ended. Warned at most once a minute."""
        now = self._clock()
        self._counters["status_dropped"] += 1
        if now - self._status_warned_at >= 60:
            self._status_warned_at = now
            log.warning(
                "job status records are being dropped (%d so far; %s): `producer cancel` "
                "cannot tell finished jobs; check that the status topic exists, is writable "
                "and has its in-sync replicas",
                self._counters["status_dropped"],
                reason,
            )

    def _drop_result(self, request: CopyRequest, reason: str) -> None:
        """A result Kafka refuses is dropped and its job resolved as acked: like a status
        record, it must never stall the partition. Warned at most once a minute."""
        self._counters["results_dropped"] += 1
        self._copies.delivered(request)
        now = self._clock()
        if now - self._result_warned_at >= 60:
            self._result_warned_at = now
            log.warning("job results are being dropped (%d so far; %s): callers waiting for "
                        "them time out; check that the results topic exists and is writable",
                        self._counters["results_dropped"], reason)  # fmt: skip

    def _block(self, entry: _Entry, reason: str, now: float) -> None:
        self._back_off(entry, now)
        if entry.blocked:
            entry.blocked = reason
            return
        entry.blocked = reason
        self._counters["blocked_events"] += 1
        log.error(
            "partition %s is stuck: cannot produce the %s (%s). Create the topic or grant "
            "this leasekeeper Write on it; retrying every %.0fs at most.",
            _name(entry.request.source),
            entry.request.describe,
            reason,
            self._config.backoff_max_s,
        )

    def _back_off(self, entry: _Entry, now: float) -> None:
        entry.attempts += 1
        # The exponent is capped: past ~1,000 failures (hours at the cap) 2**n overflows
        # a float, and the loop would stop on an OverflowError.
        delay = self._config.backoff_base_s * 2.0 ** min(entry.attempts - 1, 30)
        entry.due = now + min(self._config.backoff_max_s, delay)

    def _publish(self) -> None:
        view = OutboxView(
            pending=len(self._waiting),
            in_flight=self._in_flight,
            blocked=tuple(
                BlockedCopy(
                    topic=e.request.source.topic,
                    partition=e.request.source.partition,
                    offset=e.request.offset,
                    kind=e.request.kind,
                    reason=e.blocked,
                )
                for e in self._waiting
                if e.blocked
            ),
            counters=dict(self._counters),
        )
        with self._view_lock:
            self._view = view


def _landed(entry: _Entry) -> Callable[[int], None]:
    def landed(offset: int) -> None:
        entry.offset = offset

    return landed


def _can_shrink(entry: _Entry) -> bool:
    return (
        entry.request.kind
        not in (
            CopyKind.DEDUPE_CLAIM,
            CopyKind.STATUS,
            CopyKind.RETURN,
            CopyKind.LANE_DROP,
            CopyKind.RESULT,
        )
        and entry.shrink < Shrink.NO_PAYLOAD
    )


def _name(tp: TopicPart) -> str:
    return f"{tp.topic}/{tp.partition}"
