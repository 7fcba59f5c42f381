"""The outbox's pure parts: relay marks, staging built exactly as enqueue builds, the
SQLAlchemy helper, and the relay's settings checks."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobcore.kafka import KafkaException, KafkaSettings, make_producer
from jobcore.priority import PriorityClasses
from producer.outbox import SCHEMA_SQL, Outbox, RelayConfig, raw_connection
from producer.outbox.marks import Marks
from producer.request import JobRequest, build_job
from schemas.codec import EnvelopeCodec, PayloadError, SchemaRegistry
from schemas.job_headers import job_headers

NOW = 1_700_000_000.0
RECEIPT = {"order_id": 7, "email": "a@example.com", "amount_cents": 1999}


@given(st.dictionaries(st.text(min_size=1), st.dictionaries(st.integers(0, 5), st.integers(0))))
def test_marks_survive_json(positions: dict[str, dict[int, int]]) -> None:
    marks = Marks()
    for topic, ends in positions.items():
        marks = marks.with_topic(topic, ends)
    assert Marks.from_json(json.loads(marks.to_json())) == marks


def test_a_staged_row_holds_the_envelope_enqueue_would_build() -> None:
    request = JobRequest(queue="q", type="send_receipt", payload=RECEIPT, tenant_id="acme")
    staged = Outbox(clock=lambda: NOW).build([request])[0]
    codec = EnvelopeCodec(SchemaRegistry())
    expected = build_job(request, codec=codec, now=NOW, job_id=staged.job.job_id)
    assert staged.job == expected
    assert staged.envelope == codec.encode(expected)
    assert staged.row()[:3] == (staged.job.job_id, "q", "acme")


def test_an_invalid_payload_names_the_request_before_any_row() -> None:
    good = JobRequest(queue="q", type="send_receipt", payload=RECEIPT, tenant_id="a")
    bad = JobRequest(queue="q", type="send_receipt", payload={"order_id": 1}, tenant_id="a")
    with pytest.raises(PayloadError, match="request 1"):
        Outbox().build([good, bad])


def test_the_schema_creates_the_table_index_trigger_and_relay_state() -> None:
    for name in ("TABLE IF NOT EXISTS job_outbox", "INDEX IF NOT EXISTS", "pg_notify"):
        assert name in SCHEMA_SQL
    assert "job_outbox_relay" in SCHEMA_SQL


@pytest.mark.parametrize(
    ("batch", "poll", "problem"), [(0, 1.0, "batch"), (10, 0.0, "poll interval")]
)
def test_relay_settings_are_checked(batch: int, poll: float, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        RelayConfig(dsn="", batch=batch, poll_interval_s=poll)


@dataclass
class _Fairy:
    driver_connection: Any


@dataclass
class _SaConnection:
    connection: _Fairy


class _Session:
    def __init__(self, conn: _SaConnection) -> None:
        self._conn = conn

    def get_bind(self) -> None:
        return None

    def connection(self) -> _SaConnection:
        return self._conn


def test_raw_connection_unwraps_a_sqlalchemy_connection_or_session() -> None:
    driver = psycopg.Connection.__new__(psycopg.Connection)
    sa_conn = _SaConnection(_Fairy(driver))
    assert raw_connection(sa_conn) is driver
    assert raw_connection(_Session(sa_conn)) is driver


def test_raw_connection_refuses_another_driver_with_the_fix() -> None:
    with pytest.raises(TypeError, match=r"postgresql\+psycopg://"):
        raw_connection(_SaConnection(_Fairy(object())))


def test_staging_refuses_an_unknown_priority_class_naming_the_known_ones() -> None:
    typo = JobRequest(queue="q", type="send_receipt", payload=RECEIPT, tenant_id="a",
                      priority="urgnet")  # fmt: skip
    good = JobRequest(queue="q", type="send_receipt", payload=RECEIPT, tenant_id="a")
    with pytest.raises(ValueError, match=r"request 1: unknown priority class 'urgnet'") as err:
        Outbox().build([good, typo])
    assert "critical, default, bulk" in str(err.value)
    classes = PriorityClasses.parse("urgent=5,default=1")
    (staged,) = Outbox(classes=classes).build([replace(typo, priority="urgent")])
    assert staged.job.priority_class == "urgent"


def receipt_of(size: int) -> JobRequest:
    payload = {**RECEIPT, "email": "a" * size}
    return JobRequest(queue="q", type="send_receipt", payload=payload, tenant_id="acme")


def test_staging_refuses_an_envelope_too_large_for_kafka() -> None:
    with pytest.raises(PayloadError, match=r"request 0: .* bytes as a record; Kafka takes at "
                       r"most 1000000 \(message.max.bytes\)"):  # fmt: skip
        Outbox().build([receipt_of(1_000_000)])
    assert Outbox().build([receipt_of(900_000)])
    with pytest.raises(PayloadError, match="at most 2000"):
        Outbox(max_record_bytes=2_000).build([receipt_of(2_000)])


def test_staging_counts_a_record_as_the_producer_does() -> None:
    """librdkafka's own size check (produce() with the same message.max.bytes; no
    broker needed) refuses exactly the records staging refuses."""
    limit = 2_000
    outbox = Outbox(max_record_bytes=limit)
    producer = make_producer(
        KafkaSettings(bootstrap="127.0.0.1:1"), **{"message.max.bytes": limit, "log_level": 0}
    )
    verdicts = []
    try:
        for size in range(1_600, 1_800):
            staged = Outbox().build([receipt_of(size)])[0]
            try:
                producer.produce("t", key=b"acme", value=staged.envelope,
                                 headers=job_headers(staged.job, staged.envelope))  # fmt: skip
                producer_takes = True
            except KafkaException:
                producer_takes = False
            try:
                outbox.build([receipt_of(size)])
                staging_takes = True
            except PayloadError:
                staging_takes = False
            verdicts.append((size, staging_takes, producer_takes))
    finally:
        producer.purge()
    assert [v for v in verdicts if v[1] != v[2]] == []
    assert {v[1] for v in verdicts} == {True, False}
