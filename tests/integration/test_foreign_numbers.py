"""Envelopes with unusable numbers from a foreign producer reach the DLQ with the reason."""

from __future__ import annotations

import math
import time
import uuid

from jobcore.kafka import make_producer
from schemas.job import Job
from tests.system import System, wait_until


def foreign_job(system: System, **numbers: float) -> bytes:
    codec = system.codec()
    job = Job(
        job_id=uuid.uuid4().hex,
        queue=system.queue,
        tenant_id="tenant-0",
        type="noop",
        payload=codec.encode_payload("noop", {"n": 0}),
        created_at_ms=int(time.time() * 1000),
        **numbers,  # type: ignore[arg-type]
    )
    return codec.encode(job)


def test_unusable_numbers_are_dead_lettered_with_the_field_and_the_partition_moves_on(
    system: System,
) -> None:
    system.start(workers=1)
    producer = make_producer(system.kafka)
    bad = [{"timeout_s": math.nan}, {"timeout_s": math.inf}, {"attempt": -1}, {"max_attempts": 0}]
    for numbers in bad:
        producer.produce(system.topics.ready, key=b"tenant-0", value=foreign_job(system, **numbers))
    assert producer.flush(10) == 0
    ids = system.enqueue(20, tenants=1)  # same key: behind the bad records in their partition

    wait_until(lambda: set(system.runs()) >= set(ids), 60, "the jobs behind the bad records")
    system.wait_caught_up()
    letters = system.dead_letters()
    assert sorted(letter.reason for letter in letters) == ["undecodable"] * 4
    details = " | ".join(sorted(letter.detail for letter in letters))
    for expected in ("'timeout_s'", "got nan", "got inf", "'attempt'", "'max_attempts'"):
        assert expected in details, details
    assert system.leasekeeper.process is not None and system.leasekeeper.process.poll() is None
