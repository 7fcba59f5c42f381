"""A result copy through the outbox, with a real engine and store and a fake producer:
its delivery resolves the job and only then sends its status; a refusal drops it
without stalling the partition; ``--no-status`` with results warns."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from jobcore.kafka import KafkaError
from leasekeeper.core.leases import SettleKind, Settlement
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from tests.unit.test_outbox import TOPICS, TP, Rig, job, rig

__all__ = ["rig"]  # the fixture, used by name


def ack_with_result(engine: LeaseEngine, result: bytes = b'{"url":"u"}') -> None:
    engine.fetch.offer(TP, 0, job(), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    engine.workers.settle([Settlement(lease_id=grant.lease_id, token=grant.token,
                                      outcome=SettleKind.ACK,
                              result=result)])  # fmt: skip


def test_a_delivered_result_resolves_its_job_and_then_sends_its_status(rig: Rig) -> None:
    ack_with_result(rig.engine)
    rig.outbox.pump()
    assert [(s.topic, s.value) for s in rig.producer.sent] == [(TOPICS.results, b'{"url":"u"}')]
    assert rig.committable() == 0
    rig.producer.answer()
    assert rig.committable() == 1
    rig.outbox.pump()
    assert [s.topic for s in rig.producer.sent] == [TOPICS.results, TOPICS.status]


def test_a_refused_result_is_dropped_and_its_job_resolved_never_blocking(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    ack_with_result(rig.engine)
    with caplog.at_level(logging.WARNING, logger="leasekeeper.kafka.copy_sender"):
        rig.outbox.pump()
        rig.producer.answer(KafkaError.TOPIC_AUTHORIZATION_FAILED)
        rig.clock.now += 5
        rig.outbox.pump()
    assert [s.topic for s in rig.producer.sent] == [TOPICS.results, TOPICS.status]
    assert rig.outbox.blocked() == {} and rig.outbox.view().counters["results_dropped"] == 1
    assert rig.committable() == 1
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "job results are being dropped" in warning.getMessage()
    assert "results topic exists and is writable" in warning.getMessage()


def test_a_result_on_a_queue_without_status_records_is_written_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = lambda: 1_000.0  # noqa: E731
    config = EngineConfig(lease_s=10, status_records=False, queue="thumbs")
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=config, clock=clock, monotonic=clock)
    engine.partitions.assign(TP, 0)
    with caplog.at_level(logging.WARNING, logger="leasekeeper.core.results"):
        ack_with_result(engine)
    (copy,) = engine.copies.take()
    assert copy.raw_value == b'{"url":"u"}' and copy.status is None
    (warning,) = caplog.records
    assert "queue thumbs" in warning.getMessage() and "--no-status" in warning.getMessage()
