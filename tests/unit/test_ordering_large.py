"""An ordered job whose ordering-lane copy does not fit the lane (the record is JSON
with the envelope in base64) stays in its line instead of being dead-lettered.

A real engine and store, the real outbox and router, and a fake producer that
refuses records over a small size limit the way confluent-kafka does (from
``produce()``, or in the delivery report when the broker says so). Records the
outbox writes to the class topic are fetched back by the test, as the consumer
loop would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import KafkaError, KafkaException, Producer
from jobcore.topics import QueueTopics
from leasekeeper.core.leases import Grant, SettleKind, Settlement, TopicPart
from leasekeeper.core.retry_policy import Jitter, RetryPolicies, RetryPolicy
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.kafka.copy_sender import CopySender
from leasekeeper.kafka.router import KafkaRouter
from leasekeeper.ordering.values import OnDead
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job
from schemas.vocabulary import DeadLetterReason

TP = TopicPart("jobs.q", 0)
TOPICS = QueueTopics(queue="q")
CODEC = EnvelopeCodec(SchemaRegistry())
LARGE = b"p" * 3_000
# The large job's envelope fits; its lane record (about 1.37 times as large) does not.
MAX_BYTES = len(CODEC.encode(Job(job_id="job-1", queue="q", tenant_id="t1", type="noop",
                                 payload=LARGE, created_at_ms=0))) + 400  # fmt: skip
Report = Callable[[KafkaError | None, object], None]


@dataclass
class Broker:
    """Delivers at once what fits; refuses the rest as too large."""

    in_report: bool
    sent: list[tuple[str, bytes | None]] = field(default_factory=list)

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None,
                headers: object = None, on_delivery: Report | None = None) -> None:  # fmt: skip
        assert on_delivery is not None
        too_large = value is not None and len(value) > MAX_BYTES
        if too_large and not self.in_report:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        if too_large:
            on_delivery(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), None)
            return
        self.sent.append((topic, value))
        on_delivery(None, None)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    engine: LeaseEngine
    outbox: CopySender
    broker: Broker
    clock: Clock
    fetched: int = 0  # next offset of the class partition
    read: int = 0  # records of ``broker.sent`` seen

    def offer(self, job: Job) -> None:
        self.engine.fetch.offer(TP, self.fetched, job, CODEC.encode(job))
        self.fetched += 1

    def turn(self) -> None:
        """Loop turns until nothing more is sent: copies out, class records fetched."""
        while True:
            self.engine.fetch.promote_due()
            self.outbox.pump()
            fresh = self.broker.sent[self.read :]
            self.read = len(self.broker.sent)
            for topic, value in fresh:
                if topic == TP.topic and value is not None:
                    self.offer(CODEC.decode(value))
            if not fresh:
                return

    def claim(self) -> list[Grant]:
        self.turn()
        return self.engine.workers.claim("w", 10, wait_s=0)

    def settle(self, grant: Grant, outcome: SettleKind = SettleKind.ACK) -> None:
        item = Settlement(lease_id=grant.lease_id, token=grant.token, outcome=outcome,
                          error_class="Boom", message="boom")  # fmt: skip
        assert self.engine.workers.settle([item])[0].ok
        self.turn()

    def topics(self) -> set[str]:
        return {topic for topic, _ in self.broker.sent}


def make(tmp_path: Path, *, in_report: bool, on_dead: OnDead = OnDead.CONTINUE) -> Rig:
    clock = Clock()
    retries = RetryPolicies(default=RetryPolicy(jitter=Jitter.NONE))
    config = EngineConfig(lease_s=10, retries=retries, on_dead=on_dead)
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=config, clock=clock, monotonic=clock)
    engine.partitions.assign(TP, 0)
    broker = Broker(in_report=in_report)
    router = KafkaRouter(codec=CODEC, topics=TOPICS, tiers=DelayTiers(), clock=clock)
    outbox = CopySender(
        producer=cast(Producer, broker), copies=engine.copies, router=router, clock=clock
    )
    return Rig(engine=engine, outbox=outbox, broker=broker, clock=clock)


def ordered(i: int, payload: bytes = b"", max_attempts: int = 3) -> Job:
    return Job(job_id=f"job-{i}", queue="q", tenant_id="t1", type="noop", payload=payload,
               created_at_ms=0, max_attempts=max_attempts, ordering_key="user-42")  # fmt: skip


@pytest.mark.parametrize("in_report", [False, True], ids=["by-produce", "by-the-broker"])
def test_a_large_job_held_behind_a_failing_head_waits_in_its_line_and_runs_in_order(
    tmp_path: Path, in_report: bool
) -> None:
    rig = make(tmp_path, in_report=in_report)
    rig.offer(ordered(0))
    rig.offer(ordered(1, payload=LARGE))
    rig.offer(ordered(2))
    (head,) = rig.claim()
    rig.settle(head, SettleKind.NACK)  # job 0 retries from the lane; 1 and 2 wait behind it
    assert rig.claim() == []
    assert TOPICS.dlq not in rig.topics()  # job 1 did not fail: no dead letter
    assert rig.engine.commits.commit_positions()[TP][0] == 1  # job 1 holds the commit instead
    (blocked,) = rig.engine.ordering.blocked_keys()
    assert blocked.held == 1  # job 2 is in the lane; job 1 is here
    rig.clock.now += 60  # the retry is due
    order = []
    for _ in range(3):
        (grant,) = rig.claim()
        assert rig.claim() == []  # one job of the key at a time
        order.append(grant.job.job_id)
        rig.settle(grant)
    assert order == ["job-0", "job-1", "job-2"]
    assert TOPICS.dlq not in rig.topics()
    assert rig.engine.commits.commit_positions()[TP][0] == rig.fetched


def test_a_large_failing_head_is_retried_in_place_then_its_key_goes_on(tmp_path: Path) -> None:
    rig = make(tmp_path, in_report=False)
    rig.offer(ordered(0, payload=LARGE, max_attempts=2))
    rig.offer(ordered(1))
    (first,) = rig.claim()
    rig.settle(first, SettleKind.NACK)  # its retry does not fit the lane: it waits here
    assert TOPICS.dlq not in rig.topics()
    assert rig.claim() == []  # backing off, and job 1 still behind it
    rig.clock.now += 60
    (again,) = rig.claim()
    assert (again.job.job_id, again.attempt) == ("job-0", 2)
    rig.settle(again)
    (grant,) = rig.claim()
    assert grant.job.job_id == "job-1"


def test_under_on_dead_block_a_large_dead_head_is_dead_lettered_with_its_own_reason(
    tmp_path: Path,
) -> None:
    rig = make(tmp_path, in_report=False, on_dead=OnDead.BLOCK)
    rig.offer(ordered(0, payload=LARGE, max_attempts=1))
    rig.offer(ordered(1))
    (first,) = rig.claim()
    rig.settle(first, SettleKind.NACK)  # dead; its lane record (to block the key) won't fit
    letters = [CODEC.decode_dead_letter(v) for t, v in rig.broker.sent if t == TOPICS.dlq]
    assert [letter.reason for letter in letters] == [DeadLetterReason.ATTEMPTS_EXHAUSTED.value]
    # It cannot block its key from the lane: the key goes on, as with --on-dead continue.
    (grant,) = rig.claim()
    assert grant.job.job_id == "job-1"
