"""The outbox relay diverts a flood as ``enqueue`` does (issue "fair behind any flood"):
the real ``OutboxRelay`` and ``JobProducer`` over the in-memory Kafka, the fake
connection of ``test_outbox_relay_rows`` with its ``job_outbox_relay`` row kept."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast

import psycopg
import pytest

from jobcore.kafka import KafkaError, KafkaException, KafkaSettings
from jobcore.topic_admin import ensure_queue_topics
from memkafka import Cluster, installed
from producer.api import JobProducer
from producer.flood import FloodPolicy
from producer.outbox.recovery import KafkaPositions
from producer.outbox.relay import OutboxRelay, RelayConfig
from schemas.job_headers import read_switch
from tests.unit.test_outbox_recovery_marks import RelayConn
from tests.unit.test_outbox_relay_rows import job

SETTINGS = KafkaSettings(bootstrap="memory")
BURST = 20
READY, OVERFLOW = "jobs.q", "jobs.q.overflow"


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with installed(Cluster()) as cluster:
        ensure_queue_topics(SETTINGS, "q", partitions=1)
        yield cluster


def relay_of(producer: JobProducer) -> OutboxRelay:
    return OutboxRelay(RelayConfig(dsn="x", batch=500), producer, SETTINGS)


def ids(cluster: Cluster, topic: str, tenant: str) -> list[str]:
    return [
        dict(r.headers or [])["job_id"].decode()
        for r in cluster.records(topic)
        if r.key == tenant.encode()
    ]


def staged(conn: RelayConn, tenant: str, first: int, count: int) -> list[str]:
    for n in range(first, first + count):
        conn.stage(job(n, tenant=tenant))
    return [f"row{n}" for n in range(first, first + count)]


def marks_kept(conn: RelayConn) -> list[dict[str, Any]]:
    """The marks of each batch, as the relay stores them before sending it."""
    marked: list[dict[str, Any]] = []
    execute = conn.execute

    def spy(sql: str, params: Any = ()) -> Any:
        if " ".join(sql.split()).startswith("UPDATE job_outbox_relay SET inflight_max_id = %s"):
            marked.append(json.loads(params[1]))
        return execute(sql, params)

    conn.execute = spy  # type: ignore[method-assign]
    return marked


def test_a_relayed_flood_goes_to_the_overflow_lane_and_the_other_tenants_stay_ready(
    cluster: Cluster,
) -> None:
    conn = RelayConn()
    flood = staged(conn, "big", 1, 100)
    calm = staged(conn, "small", 101, 5)
    with JobProducer(SETTINGS, flood=FloodPolicy(burst=BURST, rate=0.01)) as producer:
        relay = relay_of(producer)
        marked = marks_kept(conn)
        positions = KafkaPositions(SETTINGS)
        try:
            relay.relay_batch(cast(psycopg.Connection[Any], conn), positions)
        finally:
            positions.close()
    assert conn.rows == {}, "every row relayed and deleted"
    ready, moved = ids(cluster, READY, "big"), ids(cluster, OVERFLOW, "big")
    assert ready == flood[:BURST] and moved == flood[BURST:], "the burst stays, the rest moves"
    assert ids(cluster, READY, "small") == calm and ids(cluster, OVERFLOW, "small") == []
    switches = [read_switch(r.headers) for r in cluster.records(OVERFLOW)]
    points = {(s.topic, s.partition, s.offset) for s in switches if s is not None}
    assert None not in switches, "each moved record carries the switch"
    assert points == {(READY, 0, BURST - 1)}, "behind the tenant's last ready record"
    (marks,) = marked
    assert set(marks) == {READY, OVERFLOW}, "recovery reads the lane too"


def test_a_relay_that_dies_after_a_diverted_batch_sends_none_of_it_again(
    cluster: Cluster,
) -> None:
    conn = RelayConn()
    flood = staged(conn, "big", 1, 60)
    with JobProducer(SETTINGS, flood=FloodPolicy(burst=BURST, rate=0.01)) as producer:
        relay = relay_of(producer)
        positions = KafkaPositions(SETTINGS)
        finish = relay._finish
        relay._finish = lambda conn, outcome: None  # type: ignore[method-assign]  # killed
        try:
            relay.relay_batch(cast(psycopg.Connection[Any], conn), positions)
            assert conn.inflight is not None and len(conn.rows) == 60, "sent, not deleted"
            relay._finish = finish  # type: ignore[method-assign]
            taken_over = relay_of(producer)
            taken_over.recover(cast(psycopg.Connection[Any], conn), positions)
        finally:
            positions.close()
    assert conn.rows == {}, "the rows that landed, in the lane too, are deleted, not sent"
    assert ids(cluster, OVERFLOW, "big"), "the batch was diverted"
    landed = ids(cluster, READY, "big") + ids(cluster, OVERFLOW, "big")
    assert sorted(landed) == sorted(flood) and len(landed) == 60, "no job sent twice"


class LaneUnreadable:
    """Kafka's partition ends, but the overflow lane's cannot be read."""

    def __init__(self) -> None:
        self._positions = KafkaPositions(SETTINGS)

    def ends(self, topic: str) -> dict[int, int]:
        if topic == OVERFLOW:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return self._positions.ends(topic)

    def close(self) -> None:
        self._positions.close()


def test_a_batch_whose_overflow_lane_cannot_be_marked_diverts_nothing(
    cluster: Cluster,
) -> None:
    """Recovery reads only the marked topics: a row must never land in an unmarked one."""
    conn = RelayConn()
    flood = staged(conn, "big", 1, 30)
    positions, marked = LaneUnreadable(), marks_kept(conn)
    with JobProducer(SETTINGS, flood=FloodPolicy(burst=BURST, rate=0.01)) as producer:
        try:
            relay_of(producer).relay_batch(cast(psycopg.Connection[Any], conn),
                                           cast(KafkaPositions, positions))  # fmt: skip
        finally:
            positions.close()
    assert conn.rows == {} and conn.dead == [], "relayed, not held back"
    assert ids(cluster, READY, "big") == flood and cluster.records(OVERFLOW) == []
    assert [set(m) for m in marked] == [{READY}], "the batch wrote only where it marked"
