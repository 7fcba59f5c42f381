"""Rows that can never be sent, against real PostgreSQL and real Kafka: the relay sets
them aside in job_outbox_dead, relays every good row behind them, keeps running, and
``producer outbox dead list|retry|drop`` shows and handles them."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import psycopg
import pytest
from click.testing import CliRunner

from jobcore.kafka import OFFSET_BEGINNING, KafkaSettings, TopicPartition, make_consumer
from jobcore.priority import PriorityClasses
from jobcore.topics import QueueTopics
from producer import JobProducer, JobRequest, ensure_queue_topics
from producer.cli import main as producer_cli
from producer.outbox import SCHEMA_SQL, Outbox, OutboxRelay, RelayConfig, init_schema
from producer.outbox.metrics import RelayCollector

pytestmark = pytest.mark.kafka

PARTITIONS = 3
GOOD = 1_000


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def count(dsn: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(f"SELECT count(*) FROM {table}".encode()).fetchone()
        assert row is not None
        return int(row[0])


def job_ids_in(kafka: KafkaSettings, topic: str, wanted: int) -> set[str]:
    consumer = make_consumer(kafka, f"reader-{topic}")
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    found: set[str] = set()
    deadline = time.monotonic() + 60
    try:
        while len(found) < wanted and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.5):
                assert msg.error() is None, msg.error()
                found.add(dict(msg.headers() or [])["job_id"].decode())
    finally:
        consumer.close()
    return found


@contextmanager
def relay_thread(dsn: str, kafka: KafkaSettings) -> Iterator[tuple[OutboxRelay, threading.Thread]]:
    stop = threading.Event()
    producer = JobProducer(kafka)
    config = RelayConfig(dsn=dsn, poll_interval_s=0.2, missing_topic_grace_s=1.0)
    relay = OutboxRelay(config, producer, kafka)
    thread = threading.Thread(target=relay.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield relay, thread
    finally:
        stop.set()
        thread.join(30)
        producer.close()


def request(queue: str, n: int, tenant: str, priority: str | None = None) -> JobRequest:
    payload = {"order_id": n, "email": "a@example.com", "amount_cents": 1999}
    return JobRequest(queue=queue, type="send_receipt", payload=payload, tenant_id=tenant,
                      priority=priority)  # fmt: skip


def dead_list(dsn: str) -> list[dict[str, object]]:
    done = CliRunner().invoke(producer_cli, ["outbox", "dead", "list", "--dsn", dsn, "--json"])
    assert done.exit_code == 0, done.output
    rows: list[dict[str, object]] = json.loads(done.output)
    return rows


def test_rows_that_can_never_be_sent_are_set_aside_and_every_good_row_is_relayed(
    pg_dsn: str, kafka: KafkaSettings, unique: str
) -> None:
    init_schema(pg_dsn)
    queue, gone = f"q{unique}", f"gone{unique}"
    ensure_queue_topics(kafka, queue, partitions=PARTITIONS)
    other_classes = Outbox(classes=PriorityClasses.parse("urgent=9,default=1"))
    with psycopg.connect(pg_dsn) as conn:
        missing = Outbox().stage_many(conn, [request(gone, n, "acme") for n in range(3)])
        (urgent,) = other_classes.stage_many(conn, [request(queue, 0, "acme", "urgent")])
        good = Outbox().stage_many(conn, [request(queue, n, f"t{n % 7}") for n in range(GOOD)])
    with relay_thread(pg_dsn, kafka) as (relay, thread):
        wait_for(lambda: count(pg_dsn, "job_outbox") == 0, "every row relayed or set aside")
        assert job_ids_in(kafka, QueueTopics(queue=queue).ready, GOOD) == set(good)
        dead = dead_list(pg_dsn)
        assert {(d["job_id"], d["reason"]) for d in dead} == {
            *((job_id, "missing topic") for job_id in missing),
            (urgent, "unknown priority class"),
        }
        gone_rows = [d for d in dead if d["reason"] == "missing topic"]
        (wrong_class,) = [d for d in dead if d["reason"] == "unknown priority class"]
        assert all(d["queue"] == gone and d["type"] == "send_receipt" for d in gone_rows)
        assert f"has no topic jobs.{gone}" in str(gone_rows[0]["error"])
        assert "'urgent'" in str(wrong_class["error"])
        assert "critical, default, bulk" in str(wrong_class["error"])
        table = CliRunner().invoke(producer_cli, ["outbox", "dead", "list", "--dsn", pg_dsn])
        assert table.exit_code == 0 and "missing topic" in table.output, table.output
        metrics = {m.name: m.samples[0].value for m in RelayCollector(relay, pg_dsn).collect()}
        assert metrics["outbox_dead_rows"] == 4 and relay.relayed == GOOD

        # The queue is created: one of its rows is retried (and relayed), one dropped.
        ensure_queue_topics(kafka, gone, partitions=PARTITIONS)
        retried, dropped, kept = gone_rows
        runner = CliRunner()
        done = runner.invoke(producer_cli, ["outbox", "dead", "retry", "--dsn", pg_dsn,
                                            str(retried["id"])])  # fmt: skip
        assert done.exit_code == 0 and f"job {retried['job_id']}" in done.output, done.output
        done = runner.invoke(producer_cli, ["outbox", "dead", "drop", "--dsn", pg_dsn,
                                            str(dropped["id"])])  # fmt: skip
        assert done.exit_code == 0 and "1 rows dropped" in done.output, done.output
        wait_for(lambda: count(pg_dsn, "job_outbox") == 0, "the retried row relayed")
        assert job_ids_in(kafka, QueueTopics(queue=gone).ready, 1) == {retried["job_id"]}
        left = dead_list(pg_dsn)
        assert sorted(d["id"] for d in left) == sorted([kept["id"], wrong_class["id"]])
        assert thread.is_alive() and relay.active.is_set()


def records_in_order(kafka: KafkaSettings, topic: str, wanted: int) -> list[str]:
    """Job ids in offset order per partition (one tenant: one partition)."""
    consumer = make_consumer(kafka, f"reader-{topic}")
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    found: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while len(found) < wanted and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.5):
                found.append(dict(msg.headers() or [])["job_id"].decode())
    finally:
        consumer.close()
    return found


def test_a_retried_dead_row_runs_before_the_rows_of_its_ordering_key_that_waited(
    pg_dsn: str, kafka: KafkaSettings, unique: str
) -> None:
    init_schema(pg_dsn)
    gone = f"gone{unique}"
    keyed = [replace(request(gone, n, "acme"), ordering_key="user-7") for n in range(3)]
    with psycopg.connect(pg_dsn) as conn:
        first, *later = Outbox().stage_many(conn, keyed)
    with relay_thread(pg_dsn, kafka):
        wait_for(lambda: count(pg_dsn, "job_outbox_dead") == 1, "the first row set aside")
        (dead,) = dead_list(pg_dsn)
        assert (dead["job_id"], dead["ordering_key"]) == (first, "user-7")
        assert count(pg_dsn, "job_outbox") == 2  # its key's later rows wait
        ensure_queue_topics(kafka, gone, partitions=PARTITIONS)
        done = CliRunner().invoke(producer_cli, ["outbox", "dead", "retry", "--dsn", pg_dsn,
                                                 "--all", "--queue", gone])  # fmt: skip
        assert done.exit_code == 0 and "1 rows staged again" in done.output, done.output
        wait_for(lambda: count(pg_dsn, "job_outbox") == 0, "the key's rows relayed")
    assert records_in_order(kafka, QueueTopics(queue=gone).ready, 3) == [first, *later]
    assert dead_list(pg_dsn) == []


def test_init_adds_the_dead_table_to_an_existing_outbox_and_a_retry_never_stages_twice(
    pg_dsn: str, unique: str
) -> None:
    queue_name = f"q{unique}"
    older = SCHEMA_SQL[: SCHEMA_SQL.index("-- Rows the relay set aside")]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(older.encode())
    with psycopg.connect(pg_dsn) as conn:
        (job_id,) = Outbox().stage_many(conn, [request(queue_name, 1, "acme")])
    runner = CliRunner()
    refused = runner.invoke(producer_cli, ["outbox", "relay", "--dsn", pg_dsn])
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert "no job_outbox_dead table" in refused.output
    assert "producer outbox init" in refused.output
    for _ in range(2):
        done = runner.invoke(producer_cli, ["outbox", "init", "--dsn", pg_dsn])
        assert done.exit_code == 0, done.output
    assert count(pg_dsn, "job_outbox_dead") == 0
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT job_id FROM job_outbox").fetchall() == [(job_id,)]
        conn.execute(  # a dead copy of a job that is staged again meanwhile
            "INSERT INTO job_outbox_dead (outbox_id, job_id, queue, tenant_id, envelope, "
            "staged_at, reason, error) SELECT id, job_id, queue, tenant_id, envelope, "
            "staged_at, 'too large', 'e' FROM job_outbox"
        )
    refused = runner.invoke(producer_cli, ["outbox", "dead", "retry", "--dsn", pg_dsn, "--all"])
    assert refused.exit_code == 1 and "already staged in job_outbox" in refused.output
    assert count(pg_dsn, "job_outbox_dead") == 1 and count(pg_dsn, "job_outbox") == 1
    dropped = runner.invoke(producer_cli, ["outbox", "dead", "drop", "--dsn", pg_dsn, "--all"])
    assert dropped.exit_code == 0 and f"(job {job_id}, queue {queue_name})" in dropped.output
    assert count(pg_dsn, "job_outbox_dead") == 0 and count(pg_dsn, "job_outbox") == 1
