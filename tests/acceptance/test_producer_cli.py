"""The ``producer`` command, run the way a user runs it: as a process, against a real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobcore.delay_tiers import DEFAULT_TIERS
from jobcore.kafka import (
    OFFSET_BEGINNING,
    KafkaSettings,
    Message,
    TopicPartition,
    end_offsets,
    make_consumer,
)
from schemas.codec import EnvelopeCodec, SchemaRegistry

PRODUCER = Path(sys.executable).with_name("producer")
PARTITIONS = 2
RECEIPT = {"order_id": 9, "email": "b@example.com", "amount_cents": 500, "currency": "SEK"}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KAFKA_BOOTSTRAP", "JOBS_SCHEMA_PATH", "JOBS_TOPIC_PREFIX")
    }
    return subprocess.run(
        [str(PRODUCER), *args],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


@pytest.fixture
def queue(kafka: KafkaSettings, unique: str) -> str:
    name = f"q{unique}"
    result = run(
        "create-queue", name, "--partitions", str(PARTITIONS), "--bootstrap", kafka.bootstrap
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        f"jobs.{name}",
        f"jobs.{name}.critical",
        f"jobs.{name}.bulk",
        f"jobs.{name}.overflow",
        f"jobs.{name}.dlq",
        *(f"jobs.{name}.retry.{t}" for t in DEFAULT_TIERS),
        *(f"jobs.{name}.critical.retry.{t}" for t in DEFAULT_TIERS),
        *(f"jobs.{name}.bulk.retry.{t}" for t in DEFAULT_TIERS),
    ]
    return name


def records(kafka: KafkaSettings, topic: str, count: int) -> list[Message]:
    consumer = make_consumer(kafka, f"reader-{topic}")
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got: list[Message] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            got.extend(consumer.consume(100, timeout=0.5))
    finally:
        consumer.close()
    return got


def written(kafka: KafkaSettings, topic: str) -> int:
    consumer = make_consumer(kafka, f"probe-{topic}")
    try:
        return sum(end_offsets(consumer, topic, range(PARTITIONS)).values())
    finally:
        consumer.close()


def test_create_queue_twice_is_a_no_op(kafka: KafkaSettings, queue: str) -> None:
    again = run(
        "create-queue", queue, "--partitions", str(PARTITIONS), "--bootstrap", kafka.bootstrap
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == [
        f"jobs.{queue}",
        f"jobs.{queue}.critical",
        f"jobs.{queue}.bulk",
        f"jobs.{queue}.overflow",
        f"jobs.{queue}.dlq",
        *(f"jobs.{queue}.retry.{t}" for t in DEFAULT_TIERS),
        *(f"jobs.{queue}.critical.retry.{t}" for t in DEFAULT_TIERS),
        *(f"jobs.{queue}.bulk.retry.{t}" for t in DEFAULT_TIERS),
    ]

    resized = run("create-queue", queue, "--partitions", "5", "--bootstrap", kafka.bootstrap)
    assert resized.returncode != 0
    assert "already exists with 2 partitions" in resized.stderr


def test_enqueue_prints_the_job_id_of_the_job_it_wrote(kafka: KafkaSettings, queue: str) -> None:
    result = run(
        "enqueue",
        queue,
        "send_receipt",
        "--tenant",
        "acme",
        "--payload",
        json.dumps(RECEIPT),
        "--dedupe-key",
        "order-9",
        "--max-attempts",
        "3",
        "--timeout",
        "12.5",
        env={"KAFKA_BOOTSTRAP": kafka.bootstrap},  # the default comes from the environment
    )
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip()

    [msg] = records(kafka, f"jobs.{queue}", 1)
    codec = EnvelopeCodec(SchemaRegistry())
    job = codec.decode(msg.value())
    assert (job.job_id, job.tenant_id, msg.key()) == (job_id, "acme", b"acme")
    assert (job.dedupe_key, job.max_attempts, job.timeout_s) == ("order-9", 3, 12.5)
    assert codec.decode_payload("send_receipt", job.payload) == RECEIPT


@pytest.mark.parametrize(
    ("job_type", "payload", "message"),
    [
        (
            "send_receipt",
            '{"order_id": 1, "email": "e", "amount_cents": "abc"}',
            "send_receipt payload: field 'amount_cents' expected long, got str 'abc'",
        ),
        (
            "send_receipt",
            '{"email": "e", "amount_cents": 1}',
            "send_receipt payload: field 'order_id' is required",
        ),
        ("send_receipt", '{"order_id": 1,', "--payload is not valid JSON"),
        ("send_receipt", "[1, 2]", "--payload must be a JSON object"),
        ("send_invoice", "{}", "no schema for job type 'send_invoice'"),
    ],
)
def test_a_bad_payload_exits_non_zero_and_sends_nothing(
    kafka: KafkaSettings, queue: str, job_type: str, payload: str, message: str
) -> None:
    result = run(
        "enqueue",
        queue,
        job_type,
        "--tenant",
        "acme",
        "--payload",
        payload,
        "--bootstrap",
        kafka.bootstrap,
    )
    assert result.returncode != 0
    assert message in result.stderr
    assert result.stdout == ""
    assert written(kafka, f"jobs.{queue}") == 0


def test_schema_path_adds_job_types(kafka: KafkaSettings, queue: str, tmp_path: Path) -> None:
    schema = {"type": "record", "name": "greet", "fields": [{"name": "who", "type": "string"}]}
    (tmp_path / "greet.avsc").write_text(json.dumps(schema), encoding="utf-8")
    result = run(
        "enqueue",
        queue,
        "greet",
        "--tenant",
        "acme",
        "--payload",
        '{"who": "world"}',
        "--schema-path",
        str(tmp_path),
        "--bootstrap",
        kafka.bootstrap,
    )
    assert result.returncode == 0, result.stderr
    [msg] = records(kafka, f"jobs.{queue}", 1)
    codec = EnvelopeCodec(SchemaRegistry([tmp_path]))
    assert codec.decode_payload("greet", codec.decode(msg.value()).payload) == {"who": "world"}
