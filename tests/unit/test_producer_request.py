"""The enqueue rules, without Kafka: limits, scheduling and the envelope a request becomes."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from producer.request import JobRequest, build_job
from schemas.codec import EnvelopeCodec, PayloadError, SchemaRegistry

NOW = 1_700_000_000.25
PAYLOAD = {"order_id": 1, "email": "a@example.com", "amount_cents": 250}


@pytest.fixture(scope="module")
def codec() -> EnvelopeCodec:
    return EnvelopeCodec(SchemaRegistry())


def request(**overrides: Any) -> JobRequest:
    fields: dict[str, Any] = {
        "queue": "emails",
        "type": "send_receipt",
        "payload": PAYLOAD,
        "tenant_id": "acme",
    }
    return JobRequest(**{**fields, **overrides})


def test_a_request_becomes_a_fresh_envelope(codec: EnvelopeCodec) -> None:
    job = build_job(
        request(dedupe_key="order-1", priority=5, max_attempts=3, timeout_s=2),
        codec=codec,
        now=NOW,
        job_id="id-1",
    )
    assert (job.job_id, job.queue, job.tenant_id, job.type) == (
        "id-1",
        "emails",
        "acme",
        "send_receipt",
    )
    assert (job.priority, job.max_attempts, job.timeout_s, job.dedupe_key) == (5, 3, 2.0, "order-1")
    assert job.created_at_ms == job.run_at_ms == 1_700_000_000_250
    assert (job.attempt, job.errors, job.replay_count) == (0, (), 0)
    assert codec.decode_payload("send_receipt", job.payload) == {**PAYLOAD, "currency": "EUR"}


def test_priority_defaults_to_zero(codec: EnvelopeCodec) -> None:
    assert build_job(request(), codec=codec, now=NOW, job_id="x").priority == 0


@pytest.mark.parametrize(
    "schedule",
    [
        {"run_at": datetime.fromtimestamp(NOW - 60, tz=UTC)},
        {"run_at": datetime.fromtimestamp(NOW, tz=UTC)},
        {"delay": 0},
        {"delay": timedelta(0)},
    ],
)
def test_due_jobs_run_now(codec: EnvelopeCodec, schedule: dict[str, Any]) -> None:
    job = build_job(request(**schedule), codec=codec, now=NOW, job_id="x")
    assert job.run_at_ms == int(NOW * 1000)


@pytest.mark.parametrize(
    "schedule",
    [
        {"run_at": datetime.fromtimestamp(NOW + 1, tz=UTC)},
        {"delay": 0.5},
        {"delay": timedelta(minutes=5)},
    ],
)
def test_delayed_jobs_are_not_supported_yet(codec: EnvelopeCodec, schedule: dict[str, Any]) -> None:
    with pytest.raises(NotImplementedError, match=r"delayed jobs \(run_at/delay in the future\)"):
        build_job(request(**schedule), codec=codec, now=NOW, job_id="x")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"tenant_id": ""}, "tenant_id must be a non-empty string"),
        ({"queue": "a b"}, "invalid queue name"),
        ({"queue": ""}, "invalid queue name"),
        ({"type": ""}, "type must name a job type"),
        ({"max_attempts": 0}, "max_attempts must be >= 1"),
        ({"max_attempts": 2**31}, "max_attempts must be >= 1"),
        ({"timeout_s": 0}, "timeout_s must be a positive number"),
        ({"timeout_s": -1.5}, "timeout_s must be a positive number"),
        ({"timeout_s": math.nan}, "timeout_s must be a positive number"),
        ({"priority": 2**31}, "priority must fit a 32-bit int"),
        ({"dedupe_key": ""}, "dedupe_key must be None or a non-empty string"),
        ({"delay": -1}, "delay must be >= 0"),
        ({"run_at": datetime(2030, 1, 1)}, "run_at must be timezone-aware"),
        (
            {"run_at": datetime(2030, 1, 1, tzinfo=UTC), "delay": 1},
            "give run_at or delay, not both",
        ),
    ],
)
def test_invalid_requests_are_refused_on_construction(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        request(**overrides)


def test_payload_errors_surface_when_the_job_is_built(codec: EnvelopeCodec) -> None:
    with pytest.raises(PayloadError, match="send_receipt payload: field 'amount_cents'"):
        build_job(
            request(payload={**PAYLOAD, "amount_cents": "lots"}), codec=codec, now=NOW, job_id="x"
        )
