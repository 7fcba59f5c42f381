"""``leasekeeper dlq list|show|replay`` against real Kafka, including a replay killed mid-way."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from jobcore.kafka import (
    KafkaSettings,
    committed_offsets,
    end_offsets,
    make_consumer,
    make_producer,
)
from jobcore.topics import QueueTopics
from leasekeeper.dlq import DeadLetterFilter, default_group, read_dead_letters
from leasekeeper.dlq.cli import dlq
from leasekeeper.dlq.reader import plan_ranges, scan
from producer import ensure_queue_topics
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import AttemptError, DeadLetter, Job
from tests.system import wait_until

PARTITIONS = 3
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
CODEC = EnvelopeCodec(SchemaRegistry())
RECEIPT = CODEC.encode_payload(
    "send_receipt", {"order_id": 42, "email": "a@example.com", "amount_cents": 1999}
)
RESIZE = CODEC.encode_payload(
    "resize_image", {"image_url": "https://example.com/a.png", "width": 64, "height": 64}
)


@dataclass(frozen=True, kw_only=True)
class Spec:
    """One dead letter to plant: its job and how it died."""

    job_id: str
    type: str = "send_receipt"
    tenant: str = "acme"
    classes: tuple[str, ...] = ("TimeoutError",)  # one per attempt, the last one killed it
    reason: str = "attempts exhausted"
    died_at_ms: int = T0


def dead_letter(queue: str, spec: Spec) -> DeadLetter:
    errors = tuple(
        AttemptError(
            attempt=n,
            at_ms=spec.died_at_ms - 1000 * (len(spec.classes) - n),
            worker=f"worker-{n}",
            error_class=error_class,
            message=f"attempt {n} failed",
            traceback=f'Traceback (most recent call last):\n  File "h.py", line {n}\n{error_class}',
        )
        for n, error_class in enumerate(spec.classes, start=1)
    )
    job = Job(
        job_id=spec.job_id,
        queue=queue,
        tenant_id=spec.tenant,
        type=spec.type,
        payload=RECEIPT if spec.type == "send_receipt" else RESIZE,
        attempt=len(errors),
        max_attempts=len(errors),
        created_at_ms=T0 - 3_600_000,
        errors=errors,
    )
    return DeadLetter(
        envelope=CODEC.encode(job),
        reason=spec.reason,
        detail=errors[-1].message,
        source_topic=f"jobs.{queue}",
        source_partition=0,
        source_offset=0,
        died_at_ms=spec.died_at_ms,
    )


def undecodable(queue: str) -> DeadLetter:
    return DeadLetter(
        raw_value=b"\x00not avro",
        raw_key=b"acme",
        reason="undecodable",
        detail="not single-object encoded: marker 006e != c301",
        source_topic=f"jobs.{queue}",
        source_partition=1,
        source_offset=7,
        died_at_ms=T0,
    )


def plant(kafka: KafkaSettings, queue: str, letters: list[DeadLetter]) -> None:
    """Produce dead letters straight to the DLQ topic, as the leasekeeper would."""
    producer = make_producer(kafka)
    topic = QueueTopics(queue=queue).dlq
    for letter in letters:
        # Keyed by tenant, as the leasekeeper writes them, so every partition gets some.
        job = CODEC.decode(letter.envelope) if letter.envelope is not None else None
        key = job.tenant_id.encode() if job is not None else letter.raw_key
        producer.produce(topic, key=key, value=CODEC.encode_dead_letter(letter))
        producer.poll(0)
    assert producer.flush(30) == 0


def ready_jobs(kafka: KafkaSettings, queue: str) -> list[Job]:
    """Every job on ``jobs.Q`` right now."""
    consumer = make_consumer(kafka, f"test-read.{uuid.uuid4().hex}")
    topic = QueueTopics(queue=queue).ready
    try:
        ranges = plan_ranges(consumer, topic, from_committed=False)
        return [CODEC.decode(record.value) for record in scan(consumer, topic, ranges)]
    finally:
        consumer.close()


def ready_count(kafka: KafkaSettings, queue: str) -> int:
    consumer = make_consumer(kafka, f"test-count.{uuid.uuid4().hex}")
    try:
        return sum(
            end_offsets(consumer, QueueTopics(queue=queue).ready, range(PARTITIONS)).values()
        )
    finally:
        consumer.close()


def group_offsets(kafka: KafkaSettings, queue: str, group: str) -> dict[int, int]:
    consumer = make_consumer(kafka, group)
    try:
        return committed_offsets(consumer, QueueTopics(queue=queue).dlq, range(PARTITIONS))
    finally:
        consumer.close()


def dlq_ends(kafka: KafkaSettings, queue: str) -> dict[int, int]:
    consumer = make_consumer(kafka, f"test-ends.{uuid.uuid4().hex}")
    try:
        return end_offsets(consumer, QueueTopics(queue=queue).dlq, range(PARTITIONS))
    finally:
        consumer.close()


def assert_fully_committed(kafka: KafkaSettings, queue: str, group: str) -> None:
    """The group committed every DLQ partition to its end (an empty one needs no commit)."""
    ends = dlq_ends(kafka, queue)
    expected = {p: end if end > 0 else -1001 for p, end in ends.items()}
    assert group_offsets(kafka, queue, group) == expected


def run_cli(kafka: KafkaSettings, *args: str) -> Result:
    # A wide terminal, so rich tables do not fold the ids the tests look for.
    result = CliRunner().invoke(
        dlq, [*args, "--bootstrap", kafka.bootstrap], env={"COLUMNS": "200"}
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def json_lines(result: Result) -> list[dict[str, object]]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


# -- list and show -----------------------------------------------------------------

SPECS = [
    Spec(job_id="r-acme-timeout", classes=("ValueError", "TimeoutError")),
    Spec(job_id="r-globex-timeout", tenant="globex", died_at_ms=T0 + 60_000),
    # Its first attempt raised TimeoutError; only the last class counts.
    Spec(
        job_id="r-acme-declined",
        classes=("TimeoutError", "CardDeclined"),
        reason="permanent error",
        died_at_ms=T0 + 120_000,
    ),
    Spec(job_id="i-acme-oom", type="resize_image", classes=("MemoryError",) * 3),
    Spec(
        job_id="i-globex-timeout",
        type="resize_image",
        tenant="globex",
        died_at_ms=T0 + 180_000,
    ),
]


@dataclass(frozen=True)
class Planted:
    kafka: KafkaSettings
    queue: str


@pytest.fixture(scope="module")
def planted(kafka_bootstrap: str) -> Iterator[Planted]:
    """One queue with the SPECS dead letters and one undecodable record, for read-only tests."""
    kafka = KafkaSettings(bootstrap=kafka_bootstrap, client_id="tests")
    queue = f"dlqread{uuid.uuid4().hex[:10]}"
    ensure_queue_topics(kafka, queue, partitions=PARTITIONS)
    plant(kafka, queue, [dead_letter(queue, spec) for spec in SPECS] + [undecodable(queue)])
    yield Planted(kafka, queue)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], {s.job_id for s in SPECS} | {None}),
        (["--type", "resize_image"], {"i-acme-oom", "i-globex-timeout"}),
        (["--tenant", "globex"], {"r-globex-timeout", "i-globex-timeout"}),
        (["--error-class", "TimeoutError"],
         {"r-acme-timeout", "r-globex-timeout", "i-globex-timeout"}),
        (["--reason", "permanent error"], {"r-acme-declined"}),
        (["--reason", "undecodable"], {None}),
        (["--since", "2026-01-01T00:01:00Z"],
         {"r-globex-timeout", "r-acme-declined", "i-globex-timeout"}),
        (["--until", "2026-01-01T00:01:00"], {"r-acme-timeout", "i-acme-oom", None}),
        (["--since", "2026-01-01T01:01:00+01:00", "--until", "2026-01-01T00:03:00Z"],
         {"r-globex-timeout", "r-acme-declined"}),
        (["--type", "send_receipt", "--tenant", "acme", "--error-class", "TimeoutError"],
         {"r-acme-timeout"}),
    ],
)  # fmt: skip
def test_list_filters(planted: Planted, flags: list[str], expected: set[str | None]) -> None:
    result = run_cli(planted.kafka, "list", "--queue", planted.queue, "--json", *flags)
    assert result.exit_code == 0, result.output
    rows = json_lines(result)
    assert {row["job_id"] for row in rows} == expected
    assert len(rows) == len(expected)


def test_list_rows_carry_the_last_error_and_sort_by_death(planted: Planted) -> None:
    rows = json_lines(run_cli(planted.kafka, "list", "--queue", planted.queue, "--json"))
    assert [row["died_at_ms"] for row in rows] == sorted(row["died_at_ms"] for row in rows)  # type: ignore[type-var]
    declined = next(row for row in rows if row["job_id"] == "r-acme-declined")
    assert declined["last_error_class"] == "CardDeclined"
    assert declined["attempts"] == 2
    assert declined["died_at"] == "2026-01-01T00:02:00Z"
    table = run_cli(planted.kafka, "list", "--queue", planted.queue, "--tenant", "globex")
    assert "r-globex-timeout" in table.stdout
    assert "2 dead letters match" in table.stdout


def test_reader_api_filters_by_job_id(planted: Planted) -> None:
    topic = QueueTopics(queue=planted.queue).dlq
    found = list(
        read_dead_letters(planted.kafka, topic, CODEC, DeadLetterFilter(job_id="i-acme-oom"))
    )
    assert len(found) == 1
    assert found[0].job is not None
    assert [e.error_class for e in found[0].job.errors] == ["MemoryError"] * 3


def test_show_prints_the_envelope_payload_and_every_attempt(planted: Planted) -> None:
    result = run_cli(planted.kafka, "show", "r-acme-declined", "--queue", planted.queue, "--json")
    assert result.exit_code == 0, result.output
    (record,) = json_lines(result)
    assert record["reason"] == "permanent error"
    job = record["job"]
    assert isinstance(job, dict)
    assert job["tenant_id"] == "acme"
    assert job["payload"]["email"] == "a@example.com"  # decoded with its schema
    assert [e["error_class"] for e in job["errors"]] == ["TimeoutError", "CardDeclined"]
    assert "CardDeclined" in job["errors"][-1]["traceback"]

    rich = run_cli(planted.kafka, "show", "r-acme-declined", "--queue", planted.queue)
    for text in ("r-acme-declined", "attempt 2", "CardDeclined", "a@example.com", "Traceback"):
        assert text in rich.stdout


def test_show_finds_an_undecodable_record_by_its_location(planted: Planted) -> None:
    rows = json_lines(run_cli(planted.kafka, "list", "--queue", planted.queue, "--json"))
    bad = next(row for row in rows if row["job_id"] is None)
    where = f"{bad['dlq_partition']}:{bad['dlq_offset']}"
    result = run_cli(planted.kafka, "show", where, "--queue", planted.queue, "--json")
    (record,) = json_lines(result)
    assert record["reason"] == "undecodable"
    assert record["raw_value"] == "AG5vdCBhdnJv"  # base64 of the bytes as read
    assert "job" not in record


def test_show_of_an_unknown_job_fails(planted: Planted) -> None:
    result = run_cli(planted.kafka, "show", "no-such-job", "--queue", planted.queue)
    assert result.exit_code == 1
    assert "no dead letter no-such-job" in result.output


def test_an_unknown_queue_is_a_clear_error(kafka: KafkaSettings, unique: str) -> None:
    result = run_cli(kafka, "list", "--queue", f"missing{unique}")
    assert result.exit_code == 2  # a setup mistake, as the README's exit codes say
    assert f"cannot read jobs.missing{unique}.dlq: no such topic" in result.output
    assert "KafkaError{" not in result.output


# -- replay ------------------------------------------------------------------------


def plant_many(kafka: KafkaSettings, queue: str, count: int) -> set[str]:
    ensure_queue_topics(kafka, queue, partitions=PARTITIONS)
    specs = [
        Spec(job_id=f"job-{n:05d}", tenant=f"tenant-{n % 7}", died_at_ms=T0 + n)
        for n in range(count)
    ]
    plant(kafka, queue, [dead_letter(queue, s) for s in specs] + [undecodable(queue)])
    return {s.job_id for s in specs}


def test_replay_puts_every_dead_letter_back_with_its_original_id(
    kafka: KafkaSettings, unique: str
) -> None:
    queue = f"dlqreplay{unique}"
    ids = plant_many(kafka, queue, 1000)
    result = run_cli(kafka, "replay", "--queue", queue)
    assert result.exit_code == 0, result.output
    assert "replayed 1000 to" in result.stdout
    assert "skipped undecodable dead letter" in result.stdout

    jobs = ready_jobs(kafka, queue)
    assert len(jobs) == 1000
    assert {job.job_id for job in jobs} == ids
    assert all(job.attempt == 0 and job.replay_count == 1 for job in jobs)
    assert all([e.error_class for e in job.errors] == ["TimeoutError"] for job in jobs)
    tenants = {job.job_id: job.tenant_id for job in jobs}
    assert tenants["job-00008"] == "tenant-1"

    group = default_group(QueueTopics(queue=queue), DeadLetterFilter())
    assert_fully_committed(kafka, queue, group)
    again = run_cli(kafka, "replay", "--queue", queue)
    assert "replayed 0 to" in again.stdout
    assert ready_count(kafka, queue) == 1000


def test_dry_run_changes_nothing(kafka: KafkaSettings, unique: str) -> None:
    queue = f"dlqdry{unique}"
    plant_many(kafka, queue, 30)
    result = run_cli(
        kafka, "replay", "--queue", queue, "--dry-run", "--json", "--tenant", "tenant-3"
    )
    assert result.exit_code == 0, result.output
    rows = json_lines(result)
    assert {row["job_id"] for row in rows} == {f"job-{n:05d}" for n in (3, 10, 17, 24)}
    assert "dry run: would replay 4" in result.stdout
    assert ready_count(kafka, queue) == 0
    group = default_group(QueueTopics(queue=queue), DeadLetterFilter(tenant="tenant-3"))
    assert set(group_offsets(kafka, queue, group).values()) == {-1001}  # nothing committed


def test_a_filtered_replay_keeps_its_own_progress(kafka: KafkaSettings, unique: str) -> None:
    queue = f"dlqfilter{unique}"
    plant_many(kafka, queue, 30)
    first = run_cli(kafka, "replay", "--queue", queue, "--tenant", "tenant-3")
    assert "replayed 4 to" in first.stdout
    assert "26 not matching" in first.stdout
    # The same selection again: already handled.
    assert (
        "replayed 0 to" in run_cli(kafka, "replay", "--queue", queue, "--tenant", "tenant-3").stdout
    )
    # Another selection has its own group, so its records were not skipped past.
    assert (
        "replayed 4 to" in run_cli(kafka, "replay", "--queue", queue, "--tenant", "tenant-4").stdout
    )
    assert ready_count(kafka, queue) == 8


# -- crash safety --------------------------------------------------------------------


def replay_process(
    kafka: KafkaSettings, queue: str, log: Path, *extra: str
) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable, "-m", "leasekeeper.dlq", "replay",
        "--queue", queue, "--bootstrap", kafka.bootstrap, *extra,
    ]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)


def test_replay_killed_mid_way_loses_nothing_when_run_again(
    kafka: KafkaSettings, unique: str, tmp_path: Path
) -> None:
    queue = f"dlqkill{unique}"
    ids = plant_many(kafka, queue, 1000)
    log = tmp_path / "replay.log"
    first = replay_process(kafka, queue, log, "--rate", "200")
    try:
        wait_until(
            lambda: ready_count(kafka, queue) >= 300 or first.poll() is not None,
            timeout=60,
            what="the throttled replay to get a third of the way",
            describe=log.read_text,
        )
        assert first.poll() is None, f"replay finished before the kill: {log.read_text()}"
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    before = ready_count(kafka, queue)
    assert before < 1000

    started = time.monotonic()
    second = replay_process(kafka, queue, log)
    assert second.wait(120) == 0, log.read_text()
    jobs = ready_jobs(kafka, queue)
    counts = Counter(job.job_id for job in jobs)
    twice = sum(1 for n in counts.values() if n > 1)
    print(
        f"killed after {before} replayed; re-run took {time.monotonic() - started:.1f}s; "
        f"{len(jobs)} jobs on the queue, {len(counts)} distinct, {twice} replayed twice"
    )
    assert set(counts) == ids
    assert max(counts.values()) <= 2
    # At 200/s with a commit every 0.2 s, only the records in flight since the
    # last commit before the kill run again: far fewer than the first run did.
    assert twice <= 150
    assert twice < before
    group = default_group(QueueTopics(queue=queue), DeadLetterFilter())
    assert_fully_committed(kafka, queue, group)
