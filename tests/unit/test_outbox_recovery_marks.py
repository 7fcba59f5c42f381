"""Relay recovery after a crash mid-batch reads only what the interrupted batch may
have written: the real ``OutboxRelay`` over the fake connection of
``test_outbox_relay_rows`` (with the ``job_outbox_relay`` row kept), and a fake
Kafka whose topic is shared with other producers."""

from __future__ import annotations

import json
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, cast

import psycopg
import pytest

from jobcore.kafka import KafkaSettings
from producer.api import Delivered, EnqueueError, JobProducer
from producer.outbox.marks import Marks
from producer.outbox.recovery import KafkaPositions
from producer.outbox.relay import BatchOutcome, OutboxRelay, RelayConfig
from schemas.job import Job
from tests.unit.test_outbox_relay_rows import Cur, FakeConn, FakeProducer, job

TOPIC = "jobs.q"
# Longer ranges than this cannot be read within recovery's time limit.
READABLE = 1_000


class Counted(Cur):
    def __init__(self, rowcount: int) -> None:
        super().__init__()
        self.rowcount = rowcount


@dataclass
class RelayConn(FakeConn):
    """FakeConn that keeps the ``job_outbox_relay`` row and runs recovery's statements."""

    inflight: int | None = None
    marks: dict[str, Any] = field(default_factory=dict)

    def execute(self, sql: str, params: Any = ()) -> Cur:
        text = " ".join(sql.split())
        if text.startswith("SELECT inflight_max_id"):
            return Cur([(self.inflight, self.marks)])
        if text.startswith("UPDATE job_outbox_relay SET inflight_max_id = %s"):
            self.inflight, self.marks = params[0], json.loads(params[1])
            return Cur()
        if text.startswith("UPDATE job_outbox_relay SET inflight_max_id = NULL"):
            self.inflight = None
            if "marks" in text:
                self.marks = {}
            return Cur()
        if text.startswith("SELECT EXISTS"):
            return Cur([(any(i <= params[0] for i in self.rows),)])
        if text.startswith("DELETE FROM job_outbox WHERE id <= %s AND job_id = ANY"):
            gone = [i for i, r in self.rows.items() if i <= params[0] and r.job_id in params[1]]
            for row_id in gone:
                del self.rows[row_id]
            return Counted(len(gone))
        return super().execute(sql, params)


@dataclass
class SharedTopic:
    """Two partitions of one topic: the relay's records and other producers' (a delay
    tier every leasekeeper writes). ``landed`` cannot read a range longer than
    ``READABLE``, as the real one times out on a long one."""

    log: dict[int, list[str]] = field(default_factory=lambda: {0: [], 1: []})
    read: list[tuple[str, int, int, int]] = field(default_factory=list)

    def others_write(self, partition: int, count: int) -> None:
        self.log[partition] += ["other"] * count

    def ends(self, topic: str) -> dict[int, int]:
        assert topic == TOPIC
        return {p: len(records) for p, records in self.log.items()}

    def landed(self, marks: Marks, timeout_s: float = 60.0) -> set[str]:
        found: set[str] = set()
        for topic, parts in marks.positions.items():
            for partition, start in parts.items():
                end = len(self.log[partition])
                if end <= start:
                    continue
                if end - start > READABLE:
                    raise TimeoutError(f"outbox recovery: {topic}/{partition} not read")
                self.read.append((topic, partition, start, end))
                found.update(self.log[partition][start:end])
        return found

    def close(self) -> None:
        return None


@dataclass
class TenantProducer:
    """Tenant ``a`` hashes to partition 0, tenant ``b`` to partition 1."""

    topic: SharedTopic

    def destination_of(self, job: Job) -> str:
        return TOPIC

    def diversion_topic(self, queue: str) -> str | None:
        return None  # diverts nothing

    def send_job(self, job: Job, *, divert: bool = True) -> Future[Delivered]:
        partition = 0 if job.tenant_id == "a" else 1
        self.topic.log[partition].append(job.job_id)
        future: Future[Delivered] = Future()
        offset = len(self.topic.log[partition]) - 1
        future.set_result(Delivered(job_id=job.job_id, topic=TOPIC, partition=partition,
                                    offset=offset))  # fmt: skip
        return future


class Crash(Exception):
    pass


class CrashBeforeDelete(OutboxRelay):
    """Once ``crash`` is set, dies where a kill -9 between produce and delete would:
    acked, nothing deleted."""

    crash = False

    def _finish(self, conn: psycopg.Connection[Any], outcome: BatchOutcome) -> None:
        if self.crash:
            raise Crash
        super()._finish(conn, outcome)


def relay_on(topic: SharedTopic, batch: int = 10) -> CrashBeforeDelete:
    producer = cast(JobProducer, TenantProducer(topic))
    return CrashBeforeDelete(RelayConfig(dsn="x", batch=batch), producer, cast(KafkaSettings, None))


def test_recovery_after_many_batches_to_one_partition_reads_only_the_last_batch() -> None:
    conn, topic = RelayConn(), SharedTopic()
    relay = relay_on(topic)
    positions = cast(KafkaPositions, topic)
    db = cast(psycopg.Connection[Any], conn)
    for n in range(50):  # weeks of batches of tenant a; others fill partition 1 meanwhile
        for i in range(10):
            conn.stage(job(n * 10 + i, tenant="a"))
        relay.relay_batch(db, positions)
        topic.others_write(1, 500)
    assert conn.rows == {}
    for i in range(5):  # then a batch of tenant b, and the relay dies before the delete
        conn.stage(job(1000 + i, tenant="b"))
    topic.others_write(1, 300)  # others go on writing before the batch
    relay.crash = True
    with pytest.raises(Crash):
        relay.relay_batch(db, positions)
    assert len(conn.rows) == 5 and conn.inflight is not None

    standby = relay_on(topic)
    assert standby.recover(db, positions) == 5
    assert conn.rows == {} and conn.inflight is None
    # Only the partition written while the batch was in flight, from where it was then.
    batch_start = 50 * 500 + 300
    assert topic.read == [(TOPIC, 1, batch_start, batch_start + 5)]


def test_a_partition_added_to_a_topic_after_earlier_batches_is_recovered() -> None:
    conn, topic = RelayConn(), SharedTopic(log={0: []})
    relay = relay_on(topic)
    db = cast(psycopg.Connection[Any], conn)
    conn.stage(job(1, tenant="a"))
    relay.relay_batch(db, cast(KafkaPositions, topic))
    topic.log[1] = []  # the topic grows a partition; tenant b hashes to it
    conn.stage(job(2, tenant="b"))
    relay.crash = True
    with pytest.raises(Crash):
        relay.relay_batch(db, cast(KafkaPositions, topic))
    assert relay_on(topic).recover(db, cast(KafkaPositions, topic)) == 1
    assert conn.rows == {}


@dataclass
class TwoTopics:
    """``jobs.gone``'s partitions cannot be read (deleted since the producer saw it)."""

    def ends(self, topic: str) -> dict[int, int]:
        if topic == "jobs.gone":
            raise EnqueueError("cannot read the partitions of jobs.gone (unknown)")
        return {0: 0}

    def close(self) -> None:
        return None


def test_a_topic_whose_ends_cannot_be_read_holds_back_its_rows_not_the_batch() -> None:
    conn, producer = RelayConn(), FakeProducer()
    gone = conn.stage(job(1, queue="gone", tenant="x"))
    conn.stage(job(2, queue="gone", tenant="x"))
    for n in range(3, 6):
        conn.stage(job(n, queue="q", tenant="y"))
    relay = OutboxRelay(
        RelayConfig(dsn="x"), cast(JobProducer, producer), cast(KafkaSettings, None)
    )
    db = cast(psycopg.Connection[Any], conn)
    assert relay.relay_batch(db, cast(KafkaPositions, TwoTopics())) == 3  # no raise
    assert sorted(conn.rows) == [gone, gone + 1]  # its tenant backs off; the rest went on
    assert producer.sends == ["row3", "row4", "row5"] and relay.relayed == 3
