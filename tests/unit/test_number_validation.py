"""Numbers from a foreign or buggy producer or worker never reach the engine's arithmetic.

A record with an unusable number is undecodable (the consumer loop
dead-letters it with the message); the worker API refuses such values where
they are written; the RPC clamps what a foreign worker sends.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest

from leasekeeper.core.leases import Settlement
from leasekeeper.rpc.server import LeaseKeeperServicer, RpcCounters
from leasekeeper.rpc.wire import MAX_RETRY_AFTER_S
from schemas import worker_pb2 as pb
from schemas.codec import DecodeError, EnvelopeCodec, SchemaRegistry
from schemas.job import Job
from schemas.lease_answer import LeaseAnswer
from tests.unit.engine_ports import with_ports
from workers import App
from workers.errors import Retry


@pytest.fixture(scope="module")
def codec() -> EnvelopeCodec:
    return EnvelopeCodec(SchemaRegistry())


def envelope(codec: EnvelopeCodec, **overrides: Any) -> bytes:
    fields: dict[str, Any] = {
        "job_id": "j1",
        "queue": "emails",
        "tenant_id": "acme",
        "type": "noop",
        "payload": b"",
        "created_at_ms": 1_700_000_000_000,
    }
    return codec.encode(Job(**{**fields, **overrides}))


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("timeout_s", math.nan, "nan"),
        ("timeout_s", math.inf, "inf"),
        ("timeout_s", -math.inf, "-inf"),
        ("timeout_s", 0.0, "0.0"),
        ("timeout_s", -5.0, "-5.0"),
        ("attempt", -1, "-1"),
        ("max_attempts", 0, "0"),
        ("max_attempts", -3, "-3"),
        ("replay_count", -1, "-1"),
    ],
)
def test_an_envelope_with_an_unusable_number_is_undecodable_naming_field_and_value(
    codec: EnvelopeCodec, field: str, value: float, shown: str
) -> None:
    data = envelope(codec, **{field: value})
    with pytest.raises(DecodeError, match=rf"'{field}'.*got {shown}$"):
        codec.decode(data)


def test_usable_edge_values_still_decode(codec: EnvelopeCodec) -> None:
    job = codec.decode(envelope(codec, timeout_s=0.001, attempt=0, max_attempts=1))
    assert (job.timeout_s, job.attempt, job.max_attempts) == (0.001, 0, 1)


@pytest.mark.parametrize("after", [math.nan, math.inf, -1.0, timedelta(seconds=-1)])
def test_retry_refuses_a_delay_that_is_not_a_finite_non_negative_number(
    after: float | timedelta,
) -> None:
    with pytest.raises(ValueError, match=r"Retry\(after=\.\.\.\) must be a finite"):
        Retry("later", after=after)


@pytest.mark.parametrize("option", ["timeout_s"])
@pytest.mark.parametrize("value", [math.nan, math.inf, 0, -1])
def test_a_handler_refuses_a_duration_that_is_not_finite_and_positive(
    option: str, value: float
) -> None:
    with pytest.raises(ValueError, match=rf"@app.job\('noop', {option}=...\).*got {value}"):
        App().job("noop", **{option: value})


class RecordingEngine:
    """Stands in for the engine: keeps what the servicer hands it."""

    run_first_classes: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.settled: list[Settlement] = []

    def settle(self, settlements: list[Settlement]) -> list[LeaseAnswer]:
        self.settled += settlements
        return [LeaseAnswer(lease_id=s.lease_id, ok=True) for s in settlements]


def test_settle_clamps_retry_after_from_a_foreign_worker_and_counts_it() -> None:
    engine = RecordingEngine()
    counters = RpcCounters()
    servicer = LeaseKeeperServicer(with_ports(engine), dict, counters)  # type: ignore[arg-type]
    sent = [math.nan, math.inf, -2.0, 1e300, 7.5, 0.0]
    request = pb.SettleRequest(
        settlements=[
            pb.Settlement(
                lease=pb.LeaseRef(lease_id=f"l{i}", lease_token="t"),
                outcome=pb.NACK,
                retry_after_s=value,
            )
            for i, value in enumerate(sent)
        ]
    )
    servicer.Settle(request, None)  # type: ignore[arg-type]
    assert [s.retry_after_s for s in engine.settled] == [
        0.0,
        MAX_RETRY_AFTER_S,
        0.0,
        MAX_RETRY_AFTER_S,
        7.5,
        0.0,
    ]
    assert counters.invalid_retry_after == 4
