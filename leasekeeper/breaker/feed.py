"""Breaker state shared by the leasekeepers of a queue: the compacted ``jobs.Q.breakers``.

Each leasekeeper counts its own calls, so the first to see a dependency fail
opens the breaker of that type; it publishes the state (keyed by job type, so
compaction keeps the latest per type) and every other leasekeeper of the queue
adopts it at its next loop turn, within about a second. An operator's ``leasekeeper
breaker open|close`` writes the same record. At start the topic is read whole
before any job is dispatched, so an open breaker survives a restart: a breaker
whose cool-down ended meanwhile starts half-open.

Every leasekeeper goes half-open on its own when the cool-down ends, so a queue
with N leasekeepers sends up to N x probes probes per half-open cycle. Records
this process wrote come back on the topic and are skipped (its own state is
newer); records from its previous life (another ``writer`` id) are taken.

The records are versioned JSON, like the control topic's, readable with
``kafka-console-consumer``.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from jobcore.kafka import (
    OFFSET_BEGINNING,
    KafkaError,
    KafkaSettings,
    Message,
    ProduceError,
    ProduceFailure,
    Producer,
    TopicPartition,
    make_admin,
    make_consumer,
    produce_once,
    read_to_end,
)
from jobcore.topics import QueueTopics
from leasekeeper.breaker.port import BreakerPort
from leasekeeper.breaker.states import BreakerState

log = logging.getLogger(__name__)

VERSION = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class BreakerRecord:
    """The state of ``job_type``'s breaker as of ``at_ms``: open until ``until_ms``
    (epoch ms; 0 while closed or held open by an operator), with the cool-down and
    the openings in a row that led there, and why. ``writer`` names the process."""

    job_type: str
    state: BreakerState
    until_ms: int
    cooldown_s: float
    trips: int
    forced: bool
    reason: str
    at_ms: int
    writer: str

    @property
    def key(self) -> bytes:
        return self.job_type.encode()

    def encode(self) -> bytes:
        return json.dumps(
            {
                "v": VERSION,
                "type": self.job_type,
                "state": self.state.value,
                "until": self.until_ms,
                "cooldown_s": self.cooldown_s,
                "trips": self.trips,
                "forced": self.forced,
                "reason": self.reason,
                "at": self.at_ms,
                "writer": self.writer,
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> BreakerRecord:
        record = json.loads(data)
        return cls(
            job_type=record["type"],
            state=BreakerState(record["state"]),
            until_ms=int(record["until"]),
            cooldown_s=float(record["cooldown_s"]),
            trips=int(record["trips"]),
            forced=bool(record["forced"]),
            reason=str(record.get("reason", "")),
            at_ms=int(record["at"]),
            writer=str(record.get("writer", "")),
        )


class BreakerFeed:
    """Reads ``jobs.Q.breakers`` into the engine and publishes the engine's changes;
    ``catch_up`` at start, then ``poll`` on every turn of the Kafka loop (a ``Feed``)."""

    what = "the breaker topic"

    def __init__(
        self,
        *,
        settings: KafkaSettings,
        topics: QueueTopics,
        breakers: BreakerPort,
        producer: Producer,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._topic = topics.breakers
        self._breakers = breakers
        self._producer = producer
        self._clock = clock
        self.writer = f"leasekeeper-{uuid.uuid4().hex[:12]}"
        self._consumer = make_consumer(settings, f"breaker-reader-{uuid.uuid4().hex[:8]}")
        self._settings = settings
        self._assigned = False
        self._missing = False  # no breaker topic (an older queue, no right to create it)
        self.published = 0
        self.applied = 0

    def _assign(self) -> None:
        if not self._assigned:
            self._consumer.assign([TopicPartition(self._topic, 0, OFFSET_BEGINNING)])
            self._assigned = True

    def catch_up(self, timeout_s: float = 60.0) -> None:
        """Apply every record written so far; raises if that takes longer than
        ``timeout_s`` (the caller retries while Kafka is unreachable). Without the
        topic, breakers still work, each leasekeeper on its own (one WARNING)."""
        topics = make_admin(self._settings).list_topics(self._topic, timeout=10).topics
        found = topics.get(self._topic)
        if found is None or (
            found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        ):
            self._missing = True
            log.warning("no topic %s: breaker state is neither shared with the other "
                        "leasekeepers nor kept across restarts; run `producer create-queue` "
                        "to add it", self._topic)  # fmt: skip
            return
        self._assign()
        read_to_end(self._consumer, TopicPartition(self._topic, 0),
                    lambda message: self._apply(message, own_too=True), timeout_s)  # fmt: skip

    def poll(self) -> None:
        """Apply what others wrote since the last call, then publish this engine's
        changes; never waits."""
        transitions = self._breakers.transitions()
        if self._missing:
            for transition in transitions:
                log.warning("breaker of job type %s is %s: %s", transition.job_type,
                            transition.state.value, transition.reason)  # fmt: skip
            return
        self._assign()
        for message in self._consumer.consume(100, timeout=0):
            self._apply(message, own_too=False)
        for transition in transitions:
            record = BreakerRecord(
                job_type=transition.job_type,
                state=transition.state,
                until_ms=self._breakers.wall_ms(transition.until),
                cooldown_s=transition.cooldown_s,
                trips=transition.trips,
                forced=transition.forced,
                reason=transition.reason,
                at_ms=int(self._clock() * 1000),
                writer=self.writer,
            )
            log.warning("breaker of job type %s is %s: %s", record.job_type,
                        record.state.value, record.reason)  # fmt: skip
            self._publish(record)

    def _publish(self, record: BreakerRecord) -> None:
        """Best effort: a lost record leaves the others to find out by themselves."""

        def delivered(failure: ProduceFailure | None, text: str) -> None:
            if failure is not None:
                log.warning("breaker state of %s not published: %s", record.job_type, text)

        try:
            produce_once(self._producer, self._topic, key=record.key, value=record.encode(),
                         on_delivery=delivered)  # fmt: skip
            self.published += 1
        except ProduceError as exc:
            log.warning("breaker state of %s not published: %s", record.job_type, exc)

    def _apply(self, message: Message, *, own_too: bool) -> None:
        value = message.value()
        if message.error() is not None or value is None:
            return
        try:
            record = BreakerRecord.decode(value)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring a malformed record on %s: %s", self._topic, exc)
            return
        if record.writer == self.writer and not own_too:
            return
        self.applied += 1
        self._breakers.adopt(
            record.job_type,
            state=record.state,
            until_ms=record.until_ms,
            cooldown_s=record.cooldown_s,
            trips=record.trips,
            forced=record.forced,
            reason=record.reason,
        )

    def close(self) -> None:
        self._consumer.close()


def operator_record(job_type: str, *, open_: bool, reason: str, at_ms: int) -> BreakerRecord:
    """What ``leasekeeper breaker open|close`` writes: held open (no probes until
    closed by hand), or closed."""
    return BreakerRecord(
        job_type=job_type,
        state=BreakerState.OPEN if open_ else BreakerState.CLOSED,
        until_ms=0,
        cooldown_s=0.0,
        trips=1 if open_ else 0,
        forced=open_,
        reason=f"operator: {reason}",
        at_ms=at_ms,
        writer="operator",
    )
