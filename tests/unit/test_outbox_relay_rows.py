"""The outbox relay never dies of a row, and sets aside the rows that can never be
sent: the real ``OutboxRelay`` over a fake connection (the statements it runs, over
dicts), and either the real ``JobProducer`` over the in-memory Kafka (``memkafka``,
whose produce faults refuse rows as a broker does) or a fake producer that refuses
the rows a test names by job id."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, cast

import psycopg
import pytest

from jobcore.kafka import KafkaError, KafkaSettings
from jobcore.priority import PriorityClasses
from jobcore.topic_admin import ensure_queue_topics
from memkafka import Cluster, installed
from producer.api import Delivered, EnqueueError, JobProducer
from producer.outbox import relay as relay_module
from producer.outbox.failures import OnDead
from producer.outbox.recovery import KafkaPositions
from producer.outbox.relay import OutboxRelay, RelayConfig
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job

CODEC = EnvelopeCodec(SchemaRegistry())
SETTINGS = KafkaSettings(bootstrap="memory")
TOO_LARGE = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
TIMED_OUT = KafkaError(KafkaError._MSG_TIMED_OUT)


class Cur:
    def __init__(self, rows: list[tuple[Any, ...]] | None = None) -> None:
        self._rows = rows or []

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None


@dataclass
class Row:
    job_id: str
    queue: str
    tenant: str
    envelope: bytes


@dataclass
class FakeConn:
    """The job_outbox, job_outbox_dead and job_outbox_relay tables as dicts, and the
    statements the relay runs on them."""

    rows: dict[int, Row] = field(default_factory=dict)
    dead: list[dict[str, Any]] = field(default_factory=list)
    stop_after_waits: int | None = None
    stop: threading.Event | None = None
    waits: list[float] = field(default_factory=list)

    def stage(self, job: Job, envelope: bytes | None = None) -> int:
        row_id = max(self.rows, default=0) + 1
        value = CODEC.encode(job) if envelope is None else envelope
        self.rows[row_id] = Row(job.job_id, job.queue, job.tenant_id, value)
        return row_id

    def execute(self, sql: str, params: Any = ()) -> Cur:
        text = " ".join(sql.split())
        if "pg_try_advisory_lock" in text:
            return Cur([(True,)])
        if text.startswith("SELECT inflight_max_id"):
            return Cur([(None, {})])
        if text.startswith("SELECT DISTINCT queue, tenant_id, ordering_key"):
            keys = {(d["queue"], d["tenant"], d["ordering_key"]) for d in self.dead}
            return Cur([k for k in keys if k[2] is not None])
        if text.startswith("SELECT id, queue, tenant_id, envelope FROM job_outbox"):
            after, queues, tenants, limit = params
            held = set(zip(queues, tenants, strict=True))
            found = [(i, r.queue, r.tenant, r.envelope) for i, r in sorted(self.rows.items())
                     if i > after and (r.queue, r.tenant) not in held]  # fmt: skip
            return Cur(found[:limit])
        if text.startswith("DELETE FROM job_outbox WHERE id = ANY"):
            for row_id in params[0]:
                del self.rows[row_id]
            return Cur()
        if text.startswith("WITH moved AS"):
            row_id, job_type, key, reason, error = params
            row = self.rows.pop(row_id)
            self.dead.append({"outbox_id": row_id, "job_id": row.job_id, "queue": row.queue,
                              "tenant": row.tenant, "type": job_type, "ordering_key": key,
                              "reason": reason, "error": error})  # fmt: skip
            return Cur()
        if text.startswith(("UPDATE job_outbox_relay", "LISTEN", "SET ")) or text == "SELECT 1":
            return Cur()
        raise AssertionError(f"unexpected statement: {text}")

    @property
    def dead_ids(self) -> dict[str, str]:
        return {d["job_id"]: d["reason"] for d in self.dead}

    def transaction(self) -> Any:
        return _Tx()

    def notifies(self, timeout: float, stop_after: int) -> Iterator[object]:
        """A wait for a NOTIFY: the test's clock for passes of ``run``."""
        self.waits.append(timeout)
        if self.stop is not None and len(self.waits) >= (self.stop_after_waits or 1):
            self.stop.set()
        return iter(())

    def __enter__(self) -> FakeConn:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _Tx:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@dataclass
class FakeProducer:
    """Checks classes as JobProducer does; refuses the job ids of ``refuse`` with
    their error."""

    refuse: dict[str, KafkaError] = field(default_factory=dict)
    classes: PriorityClasses = field(default_factory=PriorityClasses)
    sends: list[str] = field(default_factory=list)

    def destination_of(self, job: Job) -> str:
        self.classes.check(job.priority_class)
        return f"jobs.{job.queue}"

    def diversion_topic(self, queue: str) -> str | None:
        return None  # diverts nothing

    def send_job(self, job: Job, *, divert: bool = True) -> Future[Delivered]:
        topic = self.destination_of(job)
        self.sends.append(job.job_id)
        future: Future[Delivered] = Future()
        error = self.refuse.get(job.job_id)
        if error is None:
            future.set_result(Delivered(job_id=job.job_id, topic=topic, partition=0, offset=1))
        else:
            future.set_exception(EnqueueError(f"job {job.job_id} was not delivered: {error}"))
        return future


class SentJobs:
    """The real ``JobProducer`` over the in-memory Kafka, with the job ids it was
    asked to send: refusals are the cluster's produce faults, a missing queue one
    whose topic does not exist."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.producer = JobProducer(SETTINGS)
        self.sends: list[str] = []

    def destination_of(self, job: Job) -> str:
        return self.producer.destination_of(job)

    def diversion_topic(self, queue: str) -> str | None:
        return self.producer.diversion_topic(queue)

    def send_job(self, job: Job, *, divert: bool = True) -> Future[Delivered]:
        self.sends.append(job.job_id)
        return self.producer.send_job(job, divert=divert)


@pytest.fixture
def memory() -> Iterator[SentJobs]:
    with installed(Cluster()) as cluster:
        ensure_queue_topics(SETTINGS, "q", partitions=1)
        sent = SentJobs(cluster)
        yield sent
        sent.producer.close()


class Positions:
    def ends(self, topic: str) -> dict[int, int]:
        return {0: 0}

    def close(self) -> None:
        return None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class StopEvent(threading.Event):
    """Records every ``wait`` (a relay that sleeps after a row's failure calls it) and
    ends the run there: such a sleep is what the tests refuse."""

    def __init__(self) -> None:
        super().__init__()
        self.waited: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waited.append(timeout)
        self.set()
        return True


def job(n: int, *, tenant: str = "t", queue: str = "q", **fields: Any) -> Job:
    return Job(job_id=f"row{n}", queue=queue, tenant_id=tenant, type="noop", payload=b"x",
               created_at_ms=0, **fields)  # fmt: skip


def make_relay(
    producer: FakeProducer | SentJobs, clock: Clock | None = None, **config: Any
) -> OutboxRelay:
    return OutboxRelay(
        RelayConfig(dsn="x", **config),
        cast(JobProducer, producer),
        cast(KafkaSettings, None),
        monotonic=clock or Clock(),
    )


def passes(relay: OutboxRelay, conn: FakeConn, n: int) -> None:
    for _ in range(n):
        relay.relay_batch(cast(psycopg.Connection[Any], conn), cast(KafkaPositions, Positions()))


def run_until_waits(relay: OutboxRelay, conn: FakeConn, waits: int, monkeypatch: Any) -> StopEvent:
    """``relay.run`` on ``conn`` until it waited ``waits`` times for a NOTIFY."""
    stop = StopEvent()
    conn.stop, conn.stop_after_waits = stop, waits
    monkeypatch.setattr(relay_module.psycopg, "connect", lambda *a, **k: conn)
    monkeypatch.setattr(relay_module, "KafkaPositions", lambda settings: Positions())
    relay.run(stop)
    return stop


def test_poison_rows_filling_a_batch_are_set_aside_and_the_rows_behind_are_relayed(
    memory: SentJobs,
) -> None:
    conn, producer = FakeConn(), memory
    for n in range(1, 13):
        conn.stage(job(n))
    memory.cluster.fail_produces("jobs.q", KafkaError.MSG_SIZE_TOO_LARGE, count=4)  # row1-row4
    relay = make_relay(producer, batch=4)
    passes(relay, conn, 4)
    assert conn.rows == {}
    assert conn.dead_ids == {f"row{n}": "too large" for n in range(1, 5)}
    assert "MSG_SIZE_TOO_LARGE" in conn.dead[0]["error"] and conn.dead[0]["outbox_id"] == 1
    assert relay.relayed == 8 and relay.set_aside == 4
    assert producer.sends.count("row1") == 1  # set aside at once, never sent again
    assert len(memory.cluster.records("jobs.q")) == 8


def test_a_failing_row_does_not_put_the_relay_to_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    conn, producer = FakeConn(), FakeProducer(refuse={"row1": TOO_LARGE})
    for n in range(1, 4):
        conn.stage(job(n))
    relay = make_relay(producer, batch=4, poll_interval_s=1.0)
    stop = run_until_waits(relay, conn, 2, monkeypatch)
    assert stop.waited == []  # no sleep of the whole relay after a row's failure
    assert conn.rows == {} and conn.dead_ids == {"row1": "too large"}
    assert relay.relayed == 2


def test_a_row_of_an_unknown_class_does_not_kill_run_and_the_next_row_is_relayed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conn, producer = FakeConn(), FakeProducer()
    conn.stage(job(1, priority_class="urgnet"))
    conn.stage(job(2))
    relay = make_relay(producer)
    run_until_waits(relay, conn, 2, monkeypatch)  # returns: the relay did not die
    assert conn.rows == {} and producer.sends == ["row2"]
    (dead,) = conn.dead
    assert dead["reason"] == "unknown priority class" and "'urgnet'" in dead["error"]
    assert "critical, default, bulk" in dead["error"]


def test_a_stager_with_other_priority_classes_is_reported_not_fatal() -> None:
    """The relay's classes lack "urgent", which the application's setting had."""
    conn = FakeConn()
    conn.stage(job(1, priority_class="urgent"))
    conn.stage(job(2, priority_class="critical"))
    producer = FakeProducer(classes=PriorityClasses.parse("critical=6,default=3"))
    passes(make_relay(producer), conn, 1)
    assert producer.sends == ["row2"] and conn.dead_ids == {"row1": "unknown priority class"}


def test_an_undecodable_row_is_set_aside() -> None:
    conn = FakeConn()
    conn.stage(job(1), envelope=b"\x00not an envelope")
    conn.stage(job(2))
    producer = FakeProducer()
    passes(make_relay(producer), conn, 1)
    assert producer.sends == ["row2"] and conn.dead_ids == {"row1": "undecodable"}


def ordered(conn: FakeConn) -> None:
    """row1 (key k, refused for good), row2 (key k), row3 (no key), row4 (key other)."""
    conn.stage(job(1, ordering_key="k"))
    conn.stage(job(2, ordering_key="k"))
    conn.stage(job(3))
    conn.stage(job(4, ordering_key="other"))


@pytest.mark.parametrize(
    "refuse",
    [
        FakeProducer(classes=PriorityClasses.parse("critical=1,default=1")),  # at the check
        FakeProducer(refuse={"row1": TOO_LARGE}),  # by the broker
    ],
    ids=["destination", "delivery"],
)
def test_a_dead_row_blocks_its_ordering_key_until_dropped(refuse: FakeProducer) -> None:
    conn = FakeConn()
    conn.stage(job(1, ordering_key="k", priority_class="bulk"))
    conn.stage(job(2, ordering_key="k"))
    conn.stage(job(3))
    conn.stage(job(4, ordering_key="other"))
    relay = make_relay(refuse)
    passes(relay, conn, 3)
    assert set(conn.dead_ids) == {"row1"} and conn.dead[0]["ordering_key"] == "k"
    assert refuse.sends.count("row2") == 0  # waits behind its key's dead row
    assert "row3" in refuse.sends and "row4" in refuse.sends  # the tenant goes on
    assert list(conn.rows) == [2]
    conn.dead.clear()  # what `producer outbox dead drop` does to the table
    passes(relay, conn, 1)
    assert conn.rows == {} and refuse.sends[-1] == "row2"


def test_with_on_dead_continue_the_key_goes_on() -> None:
    conn, producer = FakeConn(), FakeProducer(refuse={"row1": TOO_LARGE})
    ordered(conn)
    passes(make_relay(producer, on_dead=OnDead.CONTINUE), conn, 2)
    assert conn.rows == {} and set(conn.dead_ids) == {"row1"}
    assert producer.sends.index("row1") < producer.sends.index("row2")


def test_a_key_s_second_row_is_produced_only_after_the_first_was_acknowledged() -> None:
    conn, producer = FakeConn(), FakeProducer(refuse={"row1": TIMED_OUT})
    ordered(conn)
    passes(make_relay(producer), conn, 1)
    assert producer.sends == ["row1", "row3", "row4"]  # row2 (key k) waits for row1
    assert sorted(conn.rows) == [1, 2]  # and stays: row1's tenant backs off


def test_a_retriable_failure_backs_off_its_tenant_only_exponentially() -> None:
    conn, clock = FakeConn(), Clock()
    producer = FakeProducer(refuse={"row1": TIMED_OUT})
    conn.stage(job(1, tenant="slow"))
    for n in range(3, 7):
        conn.stage(job(n, tenant="fast"))
    relay = make_relay(producer, clock, backoff_base_s=0.25, backoff_max_s=1.0)
    passes(relay, conn, 1)
    assert sorted(conn.rows) == [1]  # the other tenant went on
    conn.stage(job(2, tenant="slow"))  # a later row of the tenant that backs off
    attempts = []
    for step in (0.125, 0.125, 0.25, 0.25, 0.25, 0.5, 0.5, 0.5):  # t = 0.125 ... 2.5
        clock.now += step
        passes(relay, conn, 1)
        attempts.append(producer.sends.count("row1"))
    # tries at t = 0, 0.25 (after 0.25), 0.75 (0.5), 2.0 (1.0, the cap) ...
    assert attempts == [1, 2, 2, 3, 3, 3, 4, 4]
    assert "row2" not in producer.sends and conn.dead == []
    conn.stage(job(7, tenant="fast"))
    passes(relay, conn, 1)
    assert sorted(conn.rows) == [1, 2]  # "fast" still goes on while "slow" waits
    del producer.refuse["row1"]
    clock.now += 0.5  # t = 3.0: the 1 s backoff from 2.0 is over
    passes(relay, conn, 2)
    assert conn.rows == {} and producer.sends[-2:] == ["row1", "row2"]


def test_the_relay_waits_for_a_notify_no_longer_than_a_tenant_s_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conn, producer = FakeConn(), FakeProducer(refuse={"row1": TIMED_OUT})
    conn.stage(job(1))
    relay = make_relay(producer, poll_interval_s=5.0, backoff_base_s=0.25)
    stop = run_until_waits(relay, conn, 1, monkeypatch)
    assert conn.waits == [0.25] and stop.waited == []


def test_a_missing_topic_waits_for_its_grace_then_the_row_is_set_aside(memory: SentJobs) -> None:
    conn, clock = FakeConn(), Clock()
    producer = memory  # no topic for queue "gone"
    for n in range(1, 4):
        conn.stage(job(n, queue="gone"))
    conn.stage(job(4))
    relay = make_relay(producer, clock, missing_topic_grace_s=60.0, backoff_max_s=10.0)
    passes(relay, conn, 1)
    assert sorted(conn.rows) == [1, 2, 3] and conn.dead == []
    clock.now += 59
    passes(relay, conn, 1)
    assert conn.dead == []
    clock.now += 1
    passes(relay, conn, 1)
    assert conn.rows == {}  # the grace runs per topic, not per row
    assert conn.dead_ids == {f"row{n}": "missing topic" for n in range(1, 4)}
    assert "has no topic jobs.gone" in conn.dead[0]["error"]


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, "not authorised"),
        (KafkaError.MSG_SIZE_TOO_LARGE, "too large"),
        (KafkaError._MSG_TIMED_OUT, None),
        (KafkaError.NOT_ENOUGH_REPLICAS, None),
    ],
)
def test_failures_are_sorted_as_produce_errors_are(
    memory: SentJobs, error: int, reason: str | None
) -> None:
    """The real producer's delivery reports, as the broker sends them."""
    conn = FakeConn()
    memory.cluster.fail_produces("jobs.q", error)
    conn.stage(job(1))
    passes(make_relay(memory), conn, 1)
    assert conn.dead_ids == ({} if reason is None else {"row1": reason})
