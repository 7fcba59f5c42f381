"""Per-key ordering at the producer: the request, the envelope fields and the
one-class-per-key check (docs/ordering.md)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from click.testing import CliRunner

from producer.cli import main as producer_cli
from producer.ordering_keys import KeyClasses
from producer.request import MAX_ORDERING_KEY, build_job
from schemas.codec import EnvelopeCodec
from schemas.job import Job
from schemas.job_headers import job_headers, read_head
from tests.unit.test_producer_request import codec, request

__all__ = ["codec"]  # the module-scoped fixture, shared with the producer's tests

NOW = 1_700_000_000.0


def test_the_key_travels_in_the_envelope(codec: EnvelopeCodec) -> None:
    job = build_job(request(ordering_key="user-42"), codec=codec, now=NOW, job_id="j1")
    assert (job.ordering_key, job.ordering_seq) == ("user-42", -1)
    assert codec.decode(codec.encode(job)) == job


def test_a_seq_stamped_by_the_leasekeeper_round_trips(codec: EnvelopeCodec) -> None:
    job = build_job(request(ordering_key="user-42"), codec=codec, now=NOW, job_id="j1")
    stamped = replace(job, ordering_seq=1234)
    assert codec.decode(codec.encode(stamped)).ordering_seq == 1234


def test_a_job_without_a_key_reads_as_unordered(codec: EnvelopeCodec) -> None:
    job = build_job(request(), codec=codec, now=NOW, job_id="j1")
    decoded = codec.decode(codec.encode(job))
    assert (decoded.ordering_key, decoded.ordering_seq) == (None, -1)


def test_a_record_of_the_previous_envelope_reads_without_a_key() -> None:
    record: dict[str, object] = {
        "job_id": "j",
        "queue": "q",
        "tenant_id": "t",
        "type": "noop",
        "payload": b"",
        "priority": 0,
        "run_at_ms": 0,
        "attempt": 0,
        "max_attempts": 8,
        "timeout_s": 30.0,
        "dedupe_key": None,
        "created_at_ms": 1,
        "trace": {},
        "errors": [],
        "replay_count": 0,
        "priority_class": "default",
    }
    job = Job.from_avro(record)
    assert (job.ordering_key, job.ordering_seq) == (None, -1)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"ordering_key": ""}, "non-empty string"),
        ({"ordering_key": "k" * (MAX_ORDERING_KEY + 1)}, "at most 256"),
        ({"ordering_key": "user-42", "delay": 5.0}, "cannot be delayed"),
    ],
)
def test_bad_ordering_options_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        request(**overrides)


def test_a_key_seen_in_one_class_is_refused_in_another(codec: EnvelopeCodec) -> None:
    classes = KeyClasses()
    first = build_job(request(ordering_key="user-42"), codec=codec, now=NOW, job_id="j1")
    classes.check(first)
    classes.check(first)  # the same class again is fine
    other = build_job(
        request(ordering_key="user-42", priority="critical"), codec=codec, now=NOW, job_id="j2"
    )
    with pytest.raises(ValueError, match=r"is in priority class 'default', not 'critical'"):
        classes.check(other)
    # Another tenant's key of the same name is another line.
    elsewhere = build_job(
        request(ordering_key="user-42", priority="critical", tenant_id="globex"),
        codec=codec,
        now=NOW,
        job_id="j3",
    )
    classes.check(elsewhere)


def test_the_check_forgets_the_least_recently_used_key(codec: EnvelopeCodec) -> None:
    classes = KeyClasses(limit=1)
    classes.check(build_job(request(ordering_key="a"), codec=codec, now=NOW, job_id="j1"))
    classes.check(build_job(request(ordering_key="b"), codec=codec, now=NOW, job_id="j2"))
    again = build_job(request(ordering_key="a", priority="bulk"), codec=codec, now=NOW, job_id="j3")
    classes.check(again)  # "a" was forgotten: this producer can no longer see it


def test_the_cli_refuses_a_delayed_ordered_job_in_one_line() -> None:
    payload = '{"order_id": 1, "email": "a@example.com", "amount_cents": 2}'
    args = ["enqueue", "emails", "send_receipt", "--tenant", "acme",
            "--ordering-key", "user-42", "--delay", "5s", "--payload", payload]  # fmt: skip
    result = CliRunner().invoke(producer_cli, args)
    assert result.exit_code != 0
    assert "cannot be delayed" in result.output
    assert "Traceback" not in result.output


def test_the_key_and_seq_travel_in_the_headers_the_leasekeeper_reads(
    codec: EnvelopeCodec,
) -> None:
    job = replace(
        build_job(request(ordering_key="user-42"), codec=codec, now=NOW, job_id="j1"),
        ordering_seq=17,
    )
    value = codec.encode(job)
    head = read_head(b"acme", job_headers(job, value), value)
    assert head is not None
    assert (head.ordering_key, head.ordering_seq) == ("user-42", 17)
    plain = build_job(request(), codec=codec, now=NOW, job_id="j2")
    value = codec.encode(plain)
    head = read_head(b"acme", job_headers(plain, value), value)
    assert head is not None and (head.ordering_key, head.ordering_seq) == (None, -1)
