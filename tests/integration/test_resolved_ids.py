"""The resolved-job-id window against the real broker (issues 10 and 14): a job sent
twice with the same id (a relay killed between produce and delete sends its row
again) runs once; the second copy is skipped and the commit passes it."""

from __future__ import annotations

import time

from jobcore.kafka import make_producer
from producer.request import JobRequest, build_job
from schemas.job_headers import job_headers
from tests.system import System, wait_until


def send_twice_apart(system: System, job_id: str) -> None:
    """Produce one record (envelope and headers, as the producer and the relay write
    it), wait until it ran and was acked, produce the same record again."""
    request = JobRequest(queue=system.queue, type="noop", payload={"n": 1}, tenant_id="acme")
    job = build_job(request, codec=system.codec(), now=time.time(), job_id=job_id)
    envelope = system.codec().encode(job)
    headers = job_headers(job, envelope)
    producer = make_producer(system.kafka)
    producer.produce(system.topics.ready, key=b"acme", value=envelope, headers=headers)
    assert producer.flush(30) == 0
    wait_until(lambda: job_id in system.acks(), 60, "the first copy to be acked")
    producer.produce(system.topics.ready, key=b"acme", value=envelope, headers=headers)
    assert producer.flush(30) == 0


def test_the_same_job_id_produced_twice_runs_once(system: System, unique: str) -> None:
    system.start(workers=1, concurrency=2)
    job_id = f"dup-{unique}"
    send_twice_apart(system, job_id)
    system.wait_caught_up(60)  # the second copy was fetched and its offset resolved
    assert system.runs()[job_id] == 1, "the second copy ran"
    snapshot = system.leasekeeper.snapshot()
    assert snapshot is not None
    assert snapshot["counters"]["resolved_again"] == 1
