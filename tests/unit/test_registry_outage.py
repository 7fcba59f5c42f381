"""A Schema Registry outage when a job read from its headers must be rewritten.

The leasekeeper decodes a job's envelope only when a copy changes it (a retry, a
dead letter, a park, an overflow move). If the registry is down then and the
envelope's schema id was never seen here (``SchemaUnavailable``), the bytes are not
at fault: the copy is held, its offset holds the commit, and it is built once the
registry answers. Only a real ``DecodeError`` goes to the DLQ byte for byte (see
``test_job_headers``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import cast

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import Producer
from jobcore.topics import QueueTopics
from leasekeeper.breaker.states import BreakerState
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.copy_queue import HELD_RETRY_S
from leasekeeper.core.leases import SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.kafka.copy_sender import CopySender, OutboxConfig
from leasekeeper.kafka.router import KafkaRouter
from leasekeeper.limits.rate_limit import MIN_HOLD, rate_limit_config
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.confluent import SchemaUnavailable
from schemas.job import Job
from schemas.job_headers import JobHead, job_headers, read_head
from schemas.vocabulary import DeadLetterReason
from tests.unit.test_outbox import FakeProducer

TP = TopicPart("jobs.q", 0)
CODEC = EnvelopeCodec(SchemaRegistry())


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


class Registry:
    """The codec's decode, failing as registry mode does while the registry is down."""

    def __init__(self) -> None:
        self.down = True
        self.calls = 0

    def __call__(self, data: bytes) -> Job:
        self.calls += 1
        if self.down:
            raise SchemaUnavailable("schema id 7 is not cached and the registry is unreachable")
        return CODEC.decode(data)


def _job(n: int = 0, **fields: object) -> Job:
    base: dict[str, object] = {
        "job_id": f"j-{n}",
        "queue": "q",
        "tenant_id": "t",
        "type": "noop",
        "payload": CODEC.encode_payload("noop", {"n": n}),
        "created_at_ms": 1_700_000_000_000,
    }
    return Job(**(base | fields))  # type: ignore[arg-type]


def _head(job: Job) -> tuple[JobHead, bytes]:
    value = CODEC.encode(job)
    head = read_head(job.tenant_id.encode(), job_headers(job, value), value)
    assert head is not None and head.full is None  # read from its headers only
    return head, value


def _engine(path: Path, clock: Clock, registry: Registry, **config: object) -> LeaseEngine:
    engine = LeaseEngine(store=LeaseStore(path), config=EngineConfig(lease_s=10, **config),  # type: ignore[arg-type]
                         clock=clock, monotonic=clock, decode=registry)  # fmt: skip
    engine.partitions.assign(TP, 0)
    return engine


def _offer(engine: LeaseEngine, offset: int, job: Job) -> None:
    head, value = _head(job)
    engine.fetch.offer(TP, offset, head, value)


def _nack(engine: LeaseEngine) -> None:
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    engine.workers.settle([Settlement(lease_id=grant.lease_id, token=grant.token,
                                      outcome=SettleKind.NACK,
                              error_class="Boom", message="boom", run_s=0.25)])  # fmt: skip


def _held_then_built(engine: LeaseEngine, clock: Clock, registry: Registry) -> CopyRequest:
    """Nothing leaves while the registry is down (the offset holds the commit, the copy
    counts in flight); once it answers, the held copy is built after the backoff."""
    assert engine.copies.take() == []  # no raw dead letter, nothing at all
    assert engine.counters.schema_waits == 1
    assert (
        engine.commits.commit_positions().get(TP, (0, ""))[0] == 0
        and engine.partitions.in_flight() == 1
    )
    registry.down = False
    calls = registry.calls
    assert engine.copies.take() == []  # within the backoff: not asked again
    assert registry.calls == calls
    clock.now += HELD_RETRY_S
    (copy,) = engine.copies.take()
    assert copy.kind is not CopyKind.DEAD_RAW and copy.job is not None
    assert engine.partitions.in_flight() == 1  # the built copy, in place of the held one
    return copy


def test_a_nack_while_the_registry_is_down_is_retried_once_it_answers(tmp_path: Path) -> None:
    clock, registry = Clock(), Registry()
    engine = _engine(tmp_path, clock, registry)
    _offer(engine, 0, _job(max_attempts=5))
    _nack(engine)
    copy = _held_then_built(engine, clock, registry)
    assert copy.kind is CopyKind.RETRY and copy.job is not None
    assert copy.job.attempt == 1  # the nacked attempt was spent
    assert [(e.error_class, e.message) for e in copy.job.errors] == [("Boom", "boom")]
    assert copy.job.run_at_ms > int(clock.now * 1000) and copy.run_s == 0.25
    engine.copies.delivered(copy)
    assert engine.commits.commit_positions()[TP][0] == 1 and engine.partitions.in_flight() == 0


def test_held_copies_back_off_while_the_registry_stays_down(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One question per pass, not one per held copy; the wait doubles; one WARNING a
    minute names the outage."""
    clock, registry = Clock(), Registry()
    engine = _engine(tmp_path, clock, registry)
    for n in range(3):
        _offer(engine, n, _job(n, max_attempts=5))
    with caplog.at_level(logging.WARNING, logger="leasekeeper.core.copy_queue"):
        for _ in range(3):
            _nack(engine)
        assert registry.calls == 3  # each nack tried once
        clock.now += HELD_RETRY_S
        assert engine.copies.take() == [] and registry.calls == 4  # still down: pass ends
        clock.now += HELD_RETRY_S  # not yet: the wait doubled
        assert engine.copies.take() == [] and registry.calls == 4
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "Schema Registry does not answer" in warnings[0].message
    registry.down = False
    clock.now += HELD_RETRY_S
    copies = engine.copies.take()
    assert [(c.kind, c.offset) for c in copies] == [(CopyKind.RETRY, n) for n in range(3)]
    assert engine.counters.schema_waits == 3


def test_a_crashed_job_is_dead_lettered_once_the_registry_answers(tmp_path: Path) -> None:
    """Claimed max_attempts times without a settlement: its dead letter waits for the
    schema rather than going to the DLQ as raw bytes."""
    clock, registry = Clock(), Registry()
    engine = _engine(tmp_path, clock, registry)
    _offer(engine, 0, _job(attempt=3, max_attempts=3))
    assert engine.workers.claim("w", 1, wait_s=0) == []
    copy = _held_then_built(engine, clock, registry)
    assert copy.kind is CopyKind.DEAD and copy.reason is DeadLetterReason.ATTEMPTS_EXHAUSTED


def test_an_unknown_type_is_dead_lettered_once_the_registry_answers(tmp_path: Path) -> None:
    clock, registry = Clock(), Registry()
    engine = _engine(tmp_path, clock, registry, unknown_type_grace_s=60)
    _offer(engine, 0, _job(type="video"))
    engine.workers.claim("mailer", 1, wait_s=0, job_types=frozenset({"email"}))
    assert engine.workers.sweep_unhandled() == 0  # the grace starts
    clock.now += 60
    engine.workers.claim("mailer", 1, wait_s=0, job_types=frozenset({"email"}))
    assert engine.workers.sweep_unhandled() == 1
    copy = _held_then_built(engine, clock, registry)
    assert copy.kind is CopyKind.DEAD and copy.reason is DeadLetterReason.UNKNOWN_JOB_TYPE


def test_a_park_by_an_open_breaker_is_made_once_the_registry_answers(tmp_path: Path) -> None:
    clock, registry = Clock(), Registry()
    engine = _engine(tmp_path, clock, registry)
    _offer(engine, 0, _job())
    engine.breakers.adopt(  # an operator's open, as the breaker topic brings it
        "noop",
        state=BreakerState.OPEN,
        until_ms=int(clock() * 1000) + 60_000,
        cooldown_s=60,
        trips=1,
        forced=True,
        reason="maintenance",
    )
    copy = _held_then_built(engine, clock, registry)
    assert copy.kind is CopyKind.PARK and copy.job is not None and copy.job.attempt == 0
    assert copy.job.errors == ()  # a park spends nothing and adds no error


def test_parks_over_a_rate_limit_are_made_once_the_registry_answers(tmp_path: Path) -> None:
    """Held, they keep the run_at they were given: the wait ends when it would have."""
    clock, registry = Clock(), Registry()
    limits = rate_limit_config(by_type=["noop=1/s"])
    engine = _engine(tmp_path, clock, registry, rate_limits=limits, window_records=1000)
    for n in range(MIN_HOLD + 3):
        _offer(engine, n, _job(n))
    assert engine.limits.park_excess() == 3
    assert engine.copies.take() == [] and engine.counters.schema_waits == 3
    registry.down = False
    decided_ms = int(clock.now * 1000)
    clock.now += HELD_RETRY_S
    copies = engine.copies.take()
    assert [c.kind for c in copies] == [CopyKind.PARK] * 3
    assert all(c.job is not None and c.job.run_at_ms > decided_ms for c in copies)


def test_an_overflow_move_that_must_count_attempts_waits_for_the_registry(
    tmp_path: Path,
) -> None:
    """A flooding tenant's jobs move aside byte for byte (nothing decoded); the one whose
    offset counted claims must be rewritten, and waits for its schema."""
    clock, registry = Clock(), Registry()
    engine = _engine(tmp_path, clock, registry, window_records=100, overflow_share=0.5)
    engine._book.parts[TP].claims[3] = 2  # leased twice before (by the previous owner)
    for n in range(30):
        _offer(engine, n, _job(n, tenant_id="big"))
    assert engine.overflow.floods({TP}, 20) == 30
    moved = engine.copies.take()
    assert [c.offset for c in moved] == [n for n in range(30) if n != 3]
    assert all(c.kind is CopyKind.OVERFLOW for c in moved)
    registry.down = False
    clock.now += HELD_RETRY_S
    (copy,) = engine.copies.take()
    assert (copy.kind, copy.offset) == (CopyKind.OVERFLOW, 3)
    assert copy.job is not None and copy.job.attempt == 2


def test_a_held_copy_of_a_partition_that_moved_is_dropped(tmp_path: Path) -> None:
    """The next owner reads the job again: nothing is built for the old generation."""
    clock, registry = Clock(), Registry()
    engine = _engine(tmp_path, clock, registry)
    _offer(engine, 0, _job())
    _nack(engine)
    engine.partitions.revoke(TP)
    registry.down = False
    clock.now += HELD_RETRY_S
    assert engine.copies.take() == []


class _Codec(EnvelopeCodec):
    """The router's codec, whose decode fails as registry mode does while it is down."""

    down = True

    def decode(self, data: bytes | None) -> Job:
        if self.down:
            raise SchemaUnavailable("schema id 7 is not cached and the registry is unreachable")
        return super().decode(data)


def test_a_byte_for_byte_copy_too_large_waits_for_the_registry_to_die_decoded(
    tmp_path: Path,
) -> None:
    """The router's fallback: a hop sent byte for byte was too large for its tier, so
    it dies as its decoded job; while the registry is down the outbox backs off instead
    of dead-lettering the bytes as undecodable."""
    clock = Clock()
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(lease_s=10),
                         clock=clock, monotonic=clock)  # fmt: skip
    engine.partitions.assign(TP, 0)
    codec = _Codec(SchemaRegistry())
    producer = FakeProducer(max_bytes=1000)
    router = KafkaRouter(codec=codec, topics=QueueTopics(queue="q"), tiers=DelayTiers(),
                         clock=clock)  # fmt: skip
    outbox = CopySender(producer=cast(Producer, producer), copies=engine.copies, router=router,
                    config=OutboxConfig(backoff_base_s=0.1, backoff_max_s=1.0),
                    clock=clock)  # fmt: skip
    job = _job(payload=b"p" * 2000, run_at_ms=int(clock.now * 1000) + 30 * 60_000)
    head, value = _head(job)
    generation = engine.fetch.track_unoffered(TP, 0)
    assert generation is not None
    engine.copies.add(CopyRequest(kind=CopyKind.HOP, source=TP, offset=0, generation=generation,
                            tier="10m", head=head, raw_value=value))  # fmt: skip
    outbox.pump()  # refused as too large: rebuilt as a dead letter, which needs the schema
    outbox.pump()
    assert producer.sent == [] and outbox.view().counters["schema_waits"] == 1
    assert (
        engine.partitions.in_flight() == 1
        and engine.commits.commit_positions().get(TP, (0, ""))[0] == 0
    )
    codec.down = False
    clock.now += 0.1
    outbox.pump()  # its short-history letter is still too large: sent without the payload
    outbox.pump()
    (sent,) = producer.sent
    letter = CODEC.decode_dead_letter(sent.value)
    assert sent.topic == "jobs.q.dlq" and letter.reason == DeadLetterReason.TOO_LARGE.value
    assert letter.envelope is not None  # the decoded job, not raw bytes
    assert CODEC.decode(letter.envelope).job_id == "j-0"
    producer.answer()
    assert engine.commits.commit_positions()[TP][0] == 1
