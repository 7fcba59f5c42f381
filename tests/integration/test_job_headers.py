"""Job headers against real Kafka: records with headers, without (older producers), and
with headers the leasekeeper cannot use all run once; a retry copy carries its new
attempt in its headers."""

from __future__ import annotations

import time
import uuid

from jobcore.kafka import make_producer
from producer.request import JobRequest, build_job
from schemas.job_headers import H_VERSION, job_headers, read_head
from tests.system import System, wait_until

FAST_RETRIES = [
    "--retry-base", "0.2", "--retry-tiers", "1s,2s,5s", "--retry-budget", "1.0",
    "--breaker-default", "off",
]  # fmt: skip


def _produce_raw(system: System, kinds: list[str]) -> list[str]:
    """One noop job per kind, produced the way other writers would: ``plain`` without
    headers (an older producer), ``future`` with a newer header version, ``broken``
    with a version-1 header that does not parse."""
    codec, producer, ids = system.codec(), make_producer(system.kafka), []
    for n, kind in enumerate(kinds):
        request = JobRequest(queue=system.queue, type="noop", payload={"n": n}, tenant_id="t-raw")
        job = build_job(request, codec=codec, now=time.time(), job_id=uuid.uuid4().hex)
        value = codec.encode(job)
        headers = {
            "plain": [],
            "future": [("job_id", job.job_id.encode()), (H_VERSION, b"2"), ("lq.ty", b"?")],
            "broken": [(k, b"many" if k == "lq.ma" else v) for k, v in job_headers(job, value)],
        }[kind]
        producer.produce(system.topics.ready, key=b"t-raw", value=value, headers=headers or None)
        ids.append(job.job_id)
    assert producer.flush(10) == 0
    return ids


def test_jobs_with_and_without_headers_run_once_and_a_retry_copy_carries_its_attempt(
    system: System,
) -> None:
    system.configure(lease_s=10, extra=FAST_RETRIES)
    system.start(workers=1, concurrency=4)
    (retried,) = system.enqueue_tasks(1, fail_attempts=1)
    fresh = system.enqueue(5, tenants=2)
    raw = _produce_raw(system, ["plain", "future", "broken"])

    wait_until(lambda: set(system.runs()) >= {retried, *fresh, *raw}, 60, "every job", step=0.2)
    system.wait_caught_up()
    assert all(system.runs()[j] == 1 for j in [*fresh, *raw])
    assert [e.attempt for e in system.starts() if e.job_id == retried] == [1, 2]

    ready = system.read_topic(system.topics.ready)
    written = {m.key(): read_head(m.key(), m.headers(), m.value()) for m in ready}  # type: ignore[arg-type]
    assert written[b"tenant-0"] is not None and written[b"t-raw"] is None
    copies = [
        m for m in system.read_topic(system.topics.retry("1s"))
        if dict(m.headers() or []).get("job_id") == retried.encode()
    ]  # fmt: skip
    (copy,) = copies
    head = read_head(copy.key(), copy.headers(), copy.value())  # type: ignore[arg-type]
    assert head is not None and head.attempt == 1
    assert system.codec().decode(copy.value()).attempt == 1
