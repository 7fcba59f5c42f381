"""The enqueue rules, without Kafka: limits, scheduling, the envelope a request becomes
and the topic it is written to."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.topics import QueueTopics
from producer.request import MAX_DELAY, JobRequest, build_job, destination
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
        request(dedupe_key="order-1", priority="critical", max_attempts=3, timeout_s=2),
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
    assert (job.priority_class, job.max_attempts, job.timeout_s, job.dedupe_key) == (
        "critical",
        3,
        2.0,
        "order-1",
    )
    assert job.created_at_ms == job.run_at_ms == 1_700_000_000_250
    assert (job.attempt, job.errors, job.replay_count) == (0, (), 0)
    assert codec.decode_payload("send_receipt", job.payload) == {**PAYLOAD, "currency": "EUR"}


def test_priority_defaults_to_the_default_class(codec: EnvelopeCodec) -> None:
    job = build_job(request(), codec=codec, now=NOW, job_id="x")
    assert (job.priority_class, job.priority) == ("default", 0)


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


NOW_MS = 1_700_000_000_250
TIERS = DelayTiers()  # 1s, 10s, 1m, 10m, 1h
TOPICS = QueueTopics(queue="emails")


@pytest.mark.parametrize(
    ("schedule", "run_at_ms"),
    [
        ({"delay": 0.001}, NOW_MS + 1),
        ({"delay": 0.5}, NOW_MS + 500),
        ({"delay": 2.007}, NOW_MS + 2007),  # 2007.0000000000002 ms as floats
        ({"delay": timedelta(minutes=5)}, NOW_MS + 300_000),
        ({"delay": timedelta(days=7)}, NOW_MS + 7 * 86_400_000),
        ({"delay": MAX_DELAY}, NOW_MS + MAX_DELAY.days * 86_400_000),
        ({"run_at": datetime.fromtimestamp(NOW + 1, tz=UTC)}, NOW_MS + 1000),
        # Another zone, the same instant: 2023-11-14T22:13:21.250Z.
        (
            {
                "run_at": datetime(
                    2023, 11, 15, 0, 13, 21, 250_000, tzinfo=timezone(timedelta(hours=2))
                )
            },
            NOW_MS + 1000,
        ),
    ],
)
def test_a_delayed_job_carries_its_due_time(
    codec: EnvelopeCodec, schedule: dict[str, Any], run_at_ms: int
) -> None:
    job = build_job(request(**schedule), codec=codec, now=NOW, job_id="x")
    assert job.run_at_ms == run_at_ms
    assert job.created_at_ms == NOW_MS


@pytest.mark.parametrize(
    ("schedule", "run_at_ms"),
    [
        ({"delay": 0.0000001}, NOW_MS + 1),
        ({"delay": 0.0015}, NOW_MS + 2),
        ({"run_at": datetime.fromtimestamp(NOW, tz=UTC) + timedelta(microseconds=1)}, NOW_MS + 1),
        ({"run_at": datetime.fromtimestamp(NOW, tz=UTC) + timedelta(microseconds=999)}, NOW_MS + 1),
    ],
)
def test_a_due_time_between_milliseconds_rounds_up_so_it_is_never_early(
    codec: EnvelopeCodec, schedule: dict[str, Any], run_at_ms: int
) -> None:
    assert build_job(request(**schedule), codec=codec, now=NOW, job_id="x").run_at_ms == run_at_ms


@pytest.mark.parametrize(
    ("schedule", "topic"),
    [
        ({}, "jobs.emails"),
        ({"delay": 0}, "jobs.emails"),
        ({"run_at": datetime.fromtimestamp(NOW - 1, tz=UTC)}, "jobs.emails"),
        ({"delay": 0.001}, "jobs.emails.retry.1s"),  # shorter than every tier: the smallest
        ({"delay": 0.999}, "jobs.emails.retry.1s"),
        ({"delay": 9.999}, "jobs.emails.retry.1s"),
        ({"delay": 10}, "jobs.emails.retry.10s"),
        ({"delay": timedelta(minutes=10)}, "jobs.emails.retry.10m"),
        ({"delay": timedelta(hours=5)}, "jobs.emails.retry.1h"),
        ({"delay": timedelta(days=30)}, "jobs.emails.retry.1h"),  # the leasekeeper hops it
        ({"run_at": datetime.fromtimestamp(NOW + 90, tz=UTC)}, "jobs.emails.retry.1m"),
    ],
)
def test_a_delayed_job_goes_to_the_largest_tier_not_longer_than_its_wait(
    codec: EnvelopeCodec, schedule: dict[str, Any], topic: str
) -> None:
    job = build_job(request(**schedule), codec=codec, now=NOW, job_id="x")
    assert destination(job, TOPICS, TIERS) == topic


def test_the_tiers_and_the_prefix_choose_the_topic(codec: EnvelopeCodec) -> None:
    tiers = DelayTiers.parse("1s,2s,5s")
    topics = QueueTopics(queue="emails", prefix="staging")
    waits = {0.5: "1s", 1.999: "1s", 2: "2s", 4.9: "2s", 5: "5s", 3600: "5s"}
    for delay, tier in waits.items():
        job = build_job(request(delay=delay), codec=codec, now=NOW, job_id="x")
        assert destination(job, topics, tiers) == f"staging.emails.retry.{tier}", delay
    due = build_job(request(), codec=codec, now=NOW, job_id="x")
    assert destination(due, topics, tiers) == "staging.emails"


def test_a_run_at_beyond_the_horizon_is_refused_when_the_job_is_built(
    codec: EnvelopeCodec,
) -> None:
    far = request(run_at=datetime.fromtimestamp(NOW, tz=UTC) + MAX_DELAY + timedelta(seconds=1))
    with pytest.raises(ValueError, match=r"run_at is 30\.0 days ahead; at most 30 days"):
        build_job(far, codec=codec, now=NOW, job_id="x")
    # The same instant is fine a few seconds later: the horizon moves with the clock.
    assert build_job(far, codec=codec, now=NOW + 2, job_id="x").run_at_ms > NOW_MS


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
        ({"priority": 2}, "priority takes a priority class name"),
        ({"dedupe_key": ""}, "dedupe_key must be None or a non-empty string"),
        ({"delay": -1}, "delay must be >= 0"),
        ({"delay": timedelta(seconds=-1)}, "delay must be >= 0"),
        ({"delay": math.nan}, "delay must be >= 0"),
        ({"delay": math.inf}, "delay must be >= 0"),
        ({"delay": True}, "delay must be seconds or a timedelta"),
        ({"delay": MAX_DELAY + timedelta(seconds=1)}, r"delay is 30\.0 days ahead; at most 30"),
        ({"delay": 365 * 86400.0}, "at most 30 days are allowed"),
        (
            {"run_at": datetime(2030, 1, 1)},
            r"run_at must be timezone-aware: use an aware datetime, e\.g\. datetime\.now\(UTC\)",
        ),
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
