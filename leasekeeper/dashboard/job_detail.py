"""The Job page's account of the job itself: type, tenant, enqueue time, attempts with
their history, and the payload, read from the job's own record.

A leased job is located by its lease id, the topic, partition and offset of the
record it runs from (a retried job's record carries its earlier attempts' errors);
a finished one by its status record's ``record``, the record it last ran from (a
dead job's last attempt is in its dead letter, the Dead letters page). Records
written before that field existed, and jobs cancelled or skipped, show their
status only.
"""

from __future__ import annotations

import json
import time
import uuid

from jobcore.kafka import KafkaError, KafkaSettings, TopicPartition, make_consumer
from leasekeeper.core.leases import parse_lease_id
from leasekeeper.dashboard.html import e, table
from leasekeeper.dlq.entries import format_ms
from schemas.codec import EnvelopeCodec
from schemas.job import Job

__all__ = ["job_at", "job_section"]

# How long the page waits for the one record it reads.
READ_TIMEOUT_S = 5.0


def job_at(settings: KafkaSettings, codec: EnvelopeCodec, lease_id: str) -> Job | str:
    """The job at ``lease_id`` (``topic/partition/offset``), or why it cannot be shown."""
    try:
        tp, offset = parse_lease_id(lease_id)
    except ValueError:
        return f"the lease id {lease_id!r} names no record"
    consumer = make_consumer(
        settings, f"dashboard-job.{uuid.uuid4().hex}", **{"queued.min.messages": 1}
    )
    try:
        consumer.assign([TopicPartition(tp.topic, tp.partition, offset)])
        deadline = time.monotonic() + READ_TIMEOUT_S
        while time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1, timeout=0.2):
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    return f"reading {lease_id} failed: {error}"
                if error is None and message.offset() == offset:
                    return codec.decode(message.value())
        return f"the record {lease_id} was not read within {READ_TIMEOUT_S:g} s"
    except ValueError as exc:  # DecodeError, or a schema this dashboard does not have
        return f"the record {lease_id} cannot be decoded: {exc}"
    finally:
        consumer.close()


def job_section(job: Job | str, codec: EnvelopeCodec) -> str:
    """The job's facts, its attempt history and its payload (decoded when its type's
    schema is known here, else its size)."""
    if isinstance(job, str):
        return f'<p class="muted" id="job-detail">{e(job)}</p>'
    facts = [
        ("type", job.type),
        ("tenant", job.tenant_id),
        ("enqueued", format_ms(job.created_at_ms)),
        ("attempts before this one", job.attempt),
        ("max attempts", job.max_attempts),
    ]
    history = [
        (err.attempt, format_ms(err.at_ms), err.worker, err.error_class, err.message)
        for err in job.errors
    ]
    try:
        payload = json.dumps(codec.decode_payload(job.type, job.payload), indent=2, default=str)
    except ValueError as exc:  # DecodeError, or a type whose schema is not known here
        payload = f"{len(job.payload)} bytes, not decoded here: {exc}"
    return (
        '<h2 id="job-detail">The job</h2>'
        + table(("field", "value"), facts)
        + "<h2>Attempt history</h2>"
        + table(("attempt", "at", "worker", "error class", "message"), history, numeric=(0,))
        + f'<h2>Payload</h2><pre id="job-payload">{e(payload)}</pre>'
    )
