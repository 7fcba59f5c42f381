"""The transactional outbox against real PostgreSQL and real Kafka: a job exists in
Kafka exactly when the transaction that staged it committed, once, through relay
crashes and with two relays at once."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from jobcore.kafka import OFFSET_BEGINNING, KafkaSettings, TopicPartition, make_consumer
from jobcore.topics import QueueTopics
from producer import FloodPolicy, JobProducer, JobRequest, PayloadError, ensure_queue_topics
from producer.cli import main as producer_cli
from producer.outbox import Outbox, OutboxRelay, RelayConfig, init_schema
from producer.outbox.metrics import RelayCollector
from producer.outbox.recovery import KafkaPositions
from producer.outbox.relay import BatchOutcome
from schemas.codec import EnvelopeCodec, SchemaRegistry

pytestmark = pytest.mark.kafka

PARTITIONS = 3
RECEIPT = {"order_id": 7, "email": "a@example.com", "amount_cents": 1999}


@pytest.fixture
def queue(kafka: KafkaSettings, unique: str) -> str:
    name = f"q{unique}"
    ensure_queue_topics(kafka, name, partitions=PARTITIONS)
    return name


@pytest.fixture
def db(pg_dsn: str) -> str:
    init_schema(pg_dsn)
    return pg_dsn


@pytest.fixture
def outbox() -> Outbox:
    return Outbox()


def receipt(queue: str, n: int, tenant: str = "acme") -> JobRequest:
    return JobRequest(
        queue=queue, type="send_receipt", payload={**RECEIPT, "order_id": n}, tenant_id=tenant
    )


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def job_ids_in(kafka: KafkaSettings, topic: str, count: int, *more: str) -> list[str]:
    """Every record's job id from the start of ``topic`` (and of ``more`` topics),
    waiting for ``count``, then a little past it, so a duplicate arriving late is seen
    too."""
    consumer = make_consumer(kafka, f"reader-{topic}")
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING)
                     for t in (topic, *more) for p in range(PARTITIONS)])  # fmt: skip
    ids: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while len(ids) < count and time.monotonic() < deadline:
            ids += _ids(consumer.consume(500, timeout=0.5))
        ids += _ids(consumer.consume(500, timeout=1.0))
    finally:
        consumer.close()
    return ids


def by_tenant(kafka: KafkaSettings, topic: str, count: int) -> dict[str, list[str]]:
    """Job ids per tenant (record key), in each partition's offset order."""
    consumer = make_consumer(kafka, f"reader-{topic}")
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    found: dict[str, list[str]] = {}
    deadline = time.monotonic() + 60
    try:
        while sum(map(len, found.values())) < count and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.5):
                [job_id] = _ids([msg])
                found.setdefault(msg.key().decode(), []).append(job_id)
    finally:
        consumer.close()
    return found


def _ids(messages: list[object]) -> list[str]:
    found = []
    for msg in messages:
        assert msg.error() is None, msg.error()  # type: ignore[attr-defined]
        headers = dict(msg.headers() or [])  # type: ignore[attr-defined]
        found.append(headers["job_id"].decode())
    return found


def waiting(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM job_outbox").fetchone()
        assert row is not None
        return int(row[0])


@contextmanager
def relay_thread(
    dsn: str,
    kafka: KafkaSettings,
    *,
    batch: int = 500,
    poll: float = 0.2,
    flood: FloodPolicy | None = None,
) -> Iterator[OutboxRelay]:
    stop = threading.Event()
    producer = JobProducer(kafka, flood=flood)
    relay = OutboxRelay(RelayConfig(dsn=dsn, batch=batch, poll_interval_s=poll), producer, kafka)
    thread = threading.Thread(target=relay.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield relay
    finally:
        stop.set()
        thread.join(30)
        producer.close()


def test_a_rolled_back_transaction_never_produces_a_job(
    db: str, kafka: KafkaSettings, queue: str, outbox: Outbox
) -> None:
    with psycopg.connect(db) as conn:
        rolled_back = outbox.stage(conn, receipt(queue, 1))
        conn.rollback()
        committed = outbox.stage(conn, receipt(queue, 2))
        conn.commit()
    with relay_thread(db, kafka):
        wait_for(lambda: waiting(db) == 0, "the committed row to be relayed")
    ids = job_ids_in(kafka, QueueTopics(queue=queue).ready, 1)
    assert ids == [committed]
    assert rolled_back not in ids


def test_a_staged_job_is_the_job_enqueue_would_write(
    db: str, kafka: KafkaSettings, queue: str, outbox: Outbox
) -> None:
    with psycopg.connect(db) as conn:
        job_id = outbox.stage(conn, receipt(queue, 7, tenant="globex"))
    with relay_thread(db, kafka):
        wait_for(lambda: waiting(db) == 0, "the row to be relayed")
    consumer = make_consumer(kafka, f"reader-{queue}")
    topic = QueueTopics(queue=queue).ready
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    try:
        messages: list[object] = []
        wait_for(lambda: bool(messages.extend(consumer.consume(10, 0.5)) or messages), "record")
    finally:
        consumer.close()
    msg = messages[0]
    codec = EnvelopeCodec(SchemaRegistry())
    job = codec.decode(msg.value())  # type: ignore[attr-defined]
    assert (job.job_id, job.tenant_id, msg.key()) == (job_id, "globex", b"globex")  # type: ignore[attr-defined]
    assert codec.decode_payload("send_receipt", job.payload)["order_id"] == 7


def test_an_invalid_payload_is_refused_at_staging_and_nothing_is_written(
    db: str, queue: str, outbox: Outbox
) -> None:
    bad = JobRequest(queue=queue, type="send_receipt", payload={"order_id": 1}, tenant_id="a")
    with psycopg.connect(db) as conn, pytest.raises(PayloadError, match="request 1"):
        outbox.stage_many(conn, [receipt(queue, 1), bad])
    assert waiting(db) == 0


def test_async_staging_commits_with_the_transaction(
    db: str, kafka: KafkaSettings, queue: str, outbox: Outbox
) -> None:
    async def stage() -> list[str]:
        async with await psycopg.AsyncConnection.connect(db) as conn:
            ids = await outbox.stage_many_async(conn, [receipt(queue, n) for n in range(5)])
            await conn.commit()
            return ids

    staged = asyncio.run(stage())
    with relay_thread(db, kafka):
        wait_for(lambda: waiting(db) == 0, "the rows to be relayed")
    assert sorted(job_ids_in(kafka, QueueTopics(queue=queue).ready, 5)) == sorted(staged)


def test_two_relays_one_sends_and_the_standby_takes_over(
    db: str, kafka: KafkaSettings, queue: str, outbox: Outbox
) -> None:
    with psycopg.connect(db) as conn:
        first = outbox.stage_many(conn, [receipt(queue, n) for n in range(100)])
    with relay_thread(db, kafka, batch=7) as one, relay_thread(db, kafka, batch=7) as two:
        # The count moves just after the delete commits: wait for both.
        wait_for(
            lambda: waiting(db) == 0 and one.relayed + two.relayed == 100,
            "the first rows to be relayed",
        )
        assert one.active.is_set() != two.active.is_set()
        leader = one if one.active.is_set() else two
        standby = two if leader is one else one
        assert leader.relayed == 100 and standby.relayed == 0
    ids = job_ids_in(kafka, QueueTopics(queue=queue).ready, 100)
    assert Counter(ids) == Counter(first)


class _Crash(Exception):
    pass


class _CrashBeforeDelete(OutboxRelay):
    """Dies where a kill -9 between produce and delete would: acked, nothing deleted."""

    def _finish(self, conn: psycopg.Connection[Any], outcome: BatchOutcome) -> None:
        raise _Crash


def test_jobs_land_in_staging_order_per_tenant(
    db: str, kafka: KafkaSettings, queue: str, outbox: Outbox
) -> None:
    expected: dict[str, list[str]] = {}
    with psycopg.connect(db) as conn:
        for tx in range(10):
            requests = [receipt(queue, n, tenant=f"t{(tx + n) % 5}") for n in range(20)]
            for request, job_id in zip(requests, outbox.stage_many(conn, requests), strict=True):
                expected.setdefault(request.tenant_id, []).append(job_id)
            conn.commit()
    with relay_thread(db, kafka, batch=7):
        wait_for(lambda: waiting(db) == 0, "the rows to be relayed")
    assert by_tenant(kafka, QueueTopics(queue=queue).ready, 200) == expected


def test_a_relayed_flood_is_diverted_and_the_other_tenants_rows_stay_ready(
    db: str, kafka: KafkaSettings, queue: str, outbox: Outbox
) -> None:
    """The relay diverts as ``enqueue`` does: past its allowance a tenant's rows go to
    the overflow lane, in order, and the other tenants' rows are not written behind it."""
    with psycopg.connect(db) as conn:
        flood = outbox.stage_many(conn, [receipt(queue, n, tenant="big") for n in range(300)])
        calm = outbox.stage_many(conn, [receipt(queue, n, tenant=f"t{n}") for n in range(10)])
        conn.commit()
    with relay_thread(db, kafka, batch=100, flood=FloodPolicy(burst=50, rate=0.01)):
        wait_for(lambda: waiting(db) == 0, "the rows to be relayed")
    topics = QueueTopics(queue=queue)
    ready, moved = by_tenant(kafka, topics.ready, 60), by_tenant(kafka, topics.overflow, 250)
    assert ready["big"] == flood[:50] and moved["big"] == flood[50:], "diverted, in order"
    assert {t: ready[t] for t in ready if t != "big"} == {f"t{n}": [calm[n]] for n in range(10)}
    assert set(moved) == {"big"}, "only the flooding tenant is diverted"


def test_a_relay_restarted_after_a_crash_mid_batch_does_not_send_the_batch_again(
    db: str, kafka: KafkaSettings, queue: str, outbox: Outbox
) -> None:
    with psycopg.connect(db) as conn:
        outbox.stage_many(conn, [receipt(queue, n) for n in range(20)])
    producer = JobProducer(kafka)
    crashing = _CrashBeforeDelete(RelayConfig(dsn=db), producer, kafka)
    positions = KafkaPositions(kafka)
    try:
        with psycopg.connect(db, autocommit=True) as conn, pytest.raises(_Crash):
            crashing.relay_batch(conn, positions)
    finally:
        positions.close()
        producer.close()
    assert waiting(db) == 20  # in Kafka and still staged
    with relay_thread(db, kafka) as relay:
        wait_for(lambda: waiting(db) == 0, "the recovery")
    assert relay.recovered == 20 and relay.relayed == 0
    assert len(job_ids_in(kafka, QueueTopics(queue=queue).ready, 20)) == 20


def test_outbox_init_is_idempotent_and_a_bad_dsn_is_one_line(db: str) -> None:
    runner = CliRunner()
    for _ in range(2):
        done = runner.invoke(producer_cli, ["outbox", "init", "--dsn", db])
        assert done.exit_code == 0, done.output
    bad = runner.invoke(producer_cli, ["outbox", "init", "--dsn", db + "_missing"])
    assert bad.exit_code == 1
    assert "Traceback" not in bad.output
    assert "(from --dsn)" in bad.output and "does not exist" in bad.output


def test_a_relay_on_a_database_without_the_table_says_to_init_it(pg_dsn: str) -> None:
    done = CliRunner().invoke(producer_cli, ["outbox", "relay", "--dsn", pg_dsn])
    assert done.exit_code == 1
    assert "has no job_outbox table" in done.output and "producer outbox init" in done.output
    assert "Traceback" not in done.output


@pytest.mark.chaos
def test_kill_9_of_relays_at_random_moments_loses_nothing_and_sends_nothing_twice(
    db: str, kafka: KafkaSettings, queue: str, outbox: Outbox, tmp_path: Path
) -> None:
    """Two relays; each round commits (or rolls back) transactions, then kill -9s one
    relay at a random moment of its work and starts it again."""
    rng = random.Random(int(os.environ.get("OUTBOX_CHAOS_SEED", "14")))
    logs = [tmp_path / f"relay-{i}-0.log" for i in range(2)]
    relays = [_start_relay(db, kafka, log) for log in logs]
    staged: list[str] = []
    try:
        with psycopg.connect(db) as conn:
            for round_ in range(1, 9):
                for log in logs:
                    wait_for(lambda log=log: b"outbox relay:" in log.read_bytes(), "a relay up")
                kill_after = rng.randrange(5)
                for tx in range(5):  # transactions of 40 jobs, some rolled back
                    ids = outbox.stage_many(conn, [receipt(queue, n) for n in range(40)])
                    if rng.random() < 0.2:
                        conn.rollback()
                    else:
                        conn.commit()
                        staged += ids
                    if tx == kill_after:  # a random moment in the active relay's work
                        time.sleep(rng.uniform(0.0, 0.03))
                        victim = _active(logs)
                        relays[victim].send_signal(signal.SIGKILL)
                        relays[victim].wait()
                        logs[victim] = tmp_path / f"relay-{victim}-{round_}.log"
                        relays[victim] = _start_relay(db, kafka, logs[victim])
        wait_for(lambda: waiting(db) == 0, "every committed row to be relayed", timeout=120)
    finally:
        for process in relays:
            process.send_signal(signal.SIGKILL)
            process.wait()
    topics = QueueTopics(queue=queue)  # a relay diverts a flood of acme's rows as enqueue does
    ids = job_ids_in(kafka, topics.ready, len(staged), topics.overflow)
    assert set(ids) == set(staged), "a committed job was lost, or a rolled-back one sent"
    assert [i for i, n in Counter(ids).items() if n > 1] == [], "a row was sent twice"


def _active(logs: list[Path]) -> int:
    """The relay whose log says it holds the lock (the other is on standby), once one
    does: after a kill, the standby takes over within its poll interval."""
    wait_for(lambda: any(b"relay: active" in log.read_bytes() for log in logs), "a leader")
    return next(i for i, log in enumerate(logs) if b"relay: active" in log.read_bytes())


def _start_relay(dsn: str, kafka: KafkaSettings, log: Path) -> subprocess.Popen[bytes]:
    cmd = [
        str(Path(sys.executable).with_name("producer")), "outbox", "relay", "--dsn", dsn,
        "--bootstrap", kafka.bootstrap, "--batch", "25", "--poll-interval", "0.2",
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)


def test_metrics_show_rows_waiting_and_the_lag(db: str, kafka: KafkaSettings, queue: str) -> None:
    with psycopg.connect(db) as conn:
        Outbox().stage_many(conn, [receipt(queue, n) for n in range(3)])
    with JobProducer(kafka) as producer:
        relay = OutboxRelay(RelayConfig(dsn=db), producer, kafka)
        metrics = {m.name: m.samples[0].value for m in RelayCollector(relay, db).collect()}
    assert metrics["outbox_rows_waiting"] == 3
    assert metrics["outbox_lag_seconds"] > 0
    assert metrics["outbox_relay_active"] == 0
