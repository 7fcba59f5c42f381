"""The outbox's one failure policy, with a real engine and store and a fake producer.

The fake refuses records the way confluent-kafka does: by raising from ``produce()``
(too large for the producer, unknown topic) or through a failed delivery report
(the broker said no). Both paths must land in the same policy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import KafkaError, KafkaException, Producer
from jobcore.topics import QueueTopics
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.leases import SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.kafka.copy_sender import CopySender, OutboxConfig
from leasekeeper.kafka.router import KafkaRouter
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import AttemptError, Job

TP = TopicPart("jobs.q", 0)
TOPICS = QueueTopics(queue="q")
CODEC = EnvelopeCodec(SchemaRegistry())
Report = Callable[[KafkaError | None, object], None]


@dataclass
class Sent:
    topic: str
    value: bytes
    report: Report


@dataclass
class FakeProducer:
    """Records what is produced; a test answers each record's delivery report."""

    sent: list[Sent] = field(default_factory=list)
    refuse: list[KafkaError] = field(default_factory=list)  # raised by produce(), in order
    max_bytes: int | None = None  # larger values are refused
    too_large_in_report: bool = False  # ...in the delivery report rather than by produce()

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        headers: object = None,
        on_delivery: Report | None = None,
        partition: int | None = None,
    ) -> None:
        assert on_delivery is not None
        if self.refuse:
            raise KafkaException(self.refuse.pop(0))
        too_large = self.max_bytes is not None and len(value) > self.max_bytes
        if too_large and not self.too_large_in_report:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        self.sent.append(Sent(topic, value, on_delivery))
        if too_large:
            on_delivery(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), None)

    def answer(self, error: int | None = None) -> None:
        """The last record's delivery report: delivered, or failed with ``error``."""
        self.sent[-1].report(None if error is None else KafkaError(error), None)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    engine: LeaseEngine
    outbox: CopySender
    producer: FakeProducer
    clock: Clock

    def nack(self, job: Job) -> None:
        """Offer ``job`` at offset 0, lease it and nack it: its retry copy is queued."""
        self.engine.fetch.offer(TP, 0, job, b"x")
        (grant,) = self.engine.workers.claim("w", 1, wait_s=0)
        nack = Settlement(lease_id=grant.lease_id, token=grant.token, outcome=SettleKind.NACK)
        self.engine.workers.settle([nack])

    def committable(self) -> int:
        return self.engine.commits.commit_positions()[TP][0]


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    clock = Clock()
    engine = LeaseEngine(
        store=LeaseStore(tmp_path), config=EngineConfig(lease_s=10), clock=clock, monotonic=clock
    )
    engine.partitions.assign(TP, 0)
    producer = FakeProducer()
    router = KafkaRouter(codec=CODEC, topics=TOPICS, tiers=DelayTiers(), clock=clock)
    outbox = CopySender(
        producer=cast(Producer, producer),
        copies=engine.copies,
        router=router,
        config=OutboxConfig(backoff_base_s=0.1, backoff_max_s=1.0),
        clock=clock,
    )
    return Rig(engine=engine, outbox=outbox, producer=producer, clock=clock)


def job(*, payload: bytes = b"", errors: int = 0, text: int = 10) -> Job:
    history = tuple(
        AttemptError(
            attempt=n,
            at_ms=0,
            worker="w",
            error_class="E",
            message="m" * text,
            traceback="t" * text,
        )
        for n in range(1, errors + 1)
    )
    return Job(job_id="job-0", queue="q", tenant_id="acme", type="report", payload=payload,
               created_at_ms=0, max_attempts=50, attempt=errors, errors=history)  # fmt: skip


def test_a_transient_failure_is_sent_again_after_a_backoff_then_resolves(rig: Rig) -> None:
    rig.nack(job())
    rig.outbox.pump()
    assert [s.topic for s in rig.producer.sent] == [TOPICS.retry("1s")]
    rig.producer.answer(KafkaError._MSG_TIMED_OUT)
    rig.outbox.pump()
    assert len(rig.producer.sent) == 1  # backing off
    assert rig.committable() == 0 and rig.engine.partitions.in_flight({TP}) == 1
    rig.clock.now += 0.1
    rig.outbox.pump()
    assert len(rig.producer.sent) == 2
    rig.producer.answer()
    assert rig.committable() == 1
    assert rig.engine.partitions.in_flight({TP}) == 0
    assert rig.engine.counters.retried == 1


def test_a_full_local_queue_is_transient(rig: Rig) -> None:
    rig.producer.refuse.append(KafkaError(KafkaError._QUEUE_FULL))
    rig.nack(job())
    rig.outbox.pump()
    assert rig.producer.sent == []
    rig.clock.now += 0.1
    rig.outbox.pump()
    rig.producer.answer()
    assert rig.committable() == 1


def test_a_copy_failing_for_hours_keeps_its_capped_backoff(rig: Rig) -> None:
    """A thousand failures and more (a broker or registry down for hours): the backoff
    stays at its cap instead of overflowing a float and stopping the loop."""
    rig.producer.refuse.extend(KafkaError(KafkaError._QUEUE_FULL) for _ in range(1100))
    rig.nack(job())
    for _ in range(1100):
        rig.outbox.pump()
        rig.clock.now += 1.0
    rig.outbox.pump()
    rig.producer.answer()
    assert rig.committable() == 1


def dead_letter_job(value: bytes) -> tuple[str, Job]:
    letter = CODEC.decode_dead_letter(value)
    assert letter.envelope is not None
    return letter.reason, CODEC.decode(letter.envelope)


@pytest.mark.parametrize("in_report", [False, True], ids=["produce-raises", "delivery-report"])
@pytest.mark.parametrize(("payload", "keeps_payload"), [(b"p" * 100, True), (b"p" * 60_000, False)])
def test_a_copy_too_large_is_dead_lettered_smaller_and_resolved(
    rig: Rig, in_report: bool, payload: bytes, keeps_payload: bool
) -> None:
    """Too large with its history: dead-lettered with a short history; still too large
    (the payload itself is big): dead-lettered without the payload. Then resolved."""
    rig.producer.max_bytes = 20_000
    rig.producer.too_large_in_report = in_report
    rig.nack(job(payload=payload, errors=8, text=5_000))
    for _ in range(3):
        rig.outbox.pump()
    last = rig.producer.sent[-1]
    assert last.topic == TOPICS.dlq
    last.report(None, None)
    reason, dead = dead_letter_job(last.value)
    assert reason == "too large"
    assert (dead.job_id, dead.type, dead.tenant_id) == ("job-0", "report", "acme")
    assert dead.payload == (payload if keeps_payload else b"")
    assert [e.attempt for e in dead.errors] == [7, 8, 9]
    assert all(len(e.message) <= 200 and len(e.traceback) <= 200 for e in dead.errors)
    assert rig.committable() == 1
    assert rig.engine.counters.dead == 1 and rig.engine.partitions.in_flight({TP}) == 0


def test_a_dead_letter_too_large_for_the_reaper_does_not_raise(rig: Rig) -> None:
    """The reaper's copy fails like any other: the loop thread never sees the error."""
    rig.producer.max_bytes = 20_000
    rig.engine.fetch.offer(TP, 0, job(payload=b"p" * 60_000, errors=49), b"x")
    rig.engine.workers.claim("w", 1, wait_s=0)
    rig.clock.now += 11
    assert rig.engine.workers.expire() == 1  # attempts exhausted: a dead letter
    for _ in range(3):
        rig.outbox.pump()
    rig.producer.answer()
    reason, dead = dead_letter_job(rig.producer.sent[-1].value)
    assert reason == "attempts exhausted" and dead.payload == b""
    assert rig.committable() == 1


@pytest.mark.parametrize(
    ("error", "in_report"),
    [
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, True),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, True),
        (KafkaError._UNKNOWN_TOPIC, False),
    ],
)
def test_an_unwritable_topic_blocks_the_partition_alerts_and_retries_until_fixed(
    rig: Rig, caplog: pytest.LogCaptureFixture, error: int, in_report: bool
) -> None:
    def fail() -> None:
        if in_report:
            rig.outbox.pump()
            rig.producer.answer(error)
        else:
            rig.producer.refuse.append(KafkaError(error))
            rig.outbox.pump()

    rig.nack(job())
    with caplog.at_level(logging.ERROR, logger="leasekeeper.kafka.copy_sender"):
        fail()
        rig.outbox.pump()
        assert set(rig.outbox.blocked()) == {TP}
        assert [b.offset for b in rig.outbox.view().blocked] == [0]
        assert rig.outbox.view().counters["blocked_events"] == 1
        assert rig.committable() == 0 and rig.engine.partitions.in_flight({TP}) == 1
        rig.clock.now += 0.1
        fail()  # still not fixed: backs off further, no second alert
        rig.clock.now += 0.1
        sent = len(rig.producer.sent)
        rig.outbox.pump()
        assert len(rig.producer.sent) == sent  # 0.2s backoff now
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
    assert "jobs.q/0" in caplog.records[0].getMessage()
    rig.clock.now += 0.1
    rig.outbox.pump()  # the topic was fixed: delivered
    rig.producer.answer()
    rig.outbox.pump()
    assert rig.outbox.blocked() == {} and rig.outbox.view().blocked == ()
    assert rig.committable() == 1


@pytest.mark.parametrize("kind", [CopyKind.HOP, CopyKind.DEAD_RAW])
def test_hops_and_raw_dead_letters_count_in_flight_until_delivered(
    rig: Rig, kind: CopyKind
) -> None:
    generation = rig.engine.fetch.track_unoffered(TP, 0)
    assert generation is not None
    request = CopyRequest(kind=kind, source=TP, offset=0, generation=generation,
                          job=job(), tier="1m", raw_value=b"\x00", detail="bad bytes")  # fmt: skip
    rig.engine.copies.add(request)
    assert rig.engine.partitions.in_flight({TP}) == 1
    rig.outbox.pump()
    assert rig.engine.partitions.in_flight({TP}) == 1  # produced, no report yet
    rig.producer.answer()
    assert rig.engine.partitions.in_flight({TP}) == 0
    assert rig.committable() == 1


def test_a_copy_whose_partition_moved_is_dropped_not_sent(rig: Rig) -> None:
    rig.nack(job())
    rig.engine.partitions.revoke(TP)
    rig.engine.partitions.assign(TP, 0)  # back again, a new generation
    rig.outbox.pump()
    assert rig.producer.sent == []
    assert rig.engine.partitions.in_flight() == 0


def test_a_dedupe_claim_lets_its_job_run_once_delivered(rig: Rig) -> None:
    keyed = Job(job_id="k", queue="q", tenant_id="acme", type="noop", payload=b"",
                created_at_ms=0, dedupe_key="receipt:1")  # fmt: skip
    rig.engine.fetch.offer(TP, 0, keyed, b"x")
    assert rig.engine.partitions.in_flight({TP}) == 1
    rig.outbox.pump()
    assert [s.topic for s in rig.producer.sent] == [TOPICS.dedupe]
    assert rig.engine.workers.claim("w", 1, wait_s=0) == []
    rig.producer.answer()
    (grant,) = rig.engine.workers.claim("w", 1, wait_s=0)
    assert grant.lease_id == "jobs.q/0/0"


def test_a_status_record_that_cannot_be_written_is_dropped_never_blocking(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig.engine.fetch.offer(TP, 0, job(), b"x")
    (grant,) = rig.engine.workers.claim("w", 1, wait_s=0)
    ack = Settlement(lease_id=grant.lease_id, token=grant.token, outcome=SettleKind.ACK)
    rig.engine.workers.settle([ack])
    with caplog.at_level(logging.WARNING, logger="leasekeeper.kafka.copy_sender"):
        rig.outbox.pump()
        assert [s.topic for s in rig.producer.sent] == [TOPICS.status]
        rig.producer.answer(KafkaError.TOPIC_AUTHORIZATION_FAILED)
        rig.clock.now += 5
        rig.outbox.pump()
    assert len(rig.producer.sent) == 1  # not sent again
    assert rig.outbox.blocked() == {} and rig.outbox.view().counters["status_dropped"] == 1
    assert rig.committable() == 1
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "status records are being dropped" in warning.getMessage()


def test_a_durable_retry_is_logged_at_info_with_the_job_and_tier(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="leasekeeper.kafka.copy_sender")
    rig.nack(job())
    rig.outbox.pump()
    assert not [r for r in caplog.records if "retrying job" in r.getMessage()]  # not yet durable
    rig.producer.answer()
    (line,) = [r.getMessage() for r in caplog.records if "retrying job" in r.getMessage()]
    assert line.startswith("retrying job job-0 (report, tenant acme) after attempt 1 of 50")
    assert TOPICS.retry("1s") in line
