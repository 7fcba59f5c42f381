"""The outbox relay's backlog on the dashboard, against real PostgreSQL and real Kafka:
the relay runs as ``producer outbox relay``, the dashboard reads its report from
``PREFIX._outbox_relays``, a topic that does not exist yet when the dashboard starts."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from devtools.waiting import wait_until
from jobcore.kafka import KafkaSettings
from jobcore.topic_admin import ensure_queue_topics
from leasekeeper.dashboard.access import AccessPolicy
from leasekeeper.dashboard.actions import Actions
from leasekeeper.dashboard.fleet_view import FleetReader, FleetState
from leasekeeper.dashboard.kafka_view import KafkaView
from leasekeeper.dashboard.relays_view import RelayState
from leasekeeper.dashboard.server import Dashboard, DashboardServer
from producer import JobRequest
from producer.outbox import Outbox, init_schema
from schemas.codec import EnvelopeCodec, SchemaRegistry

pytestmark = pytest.mark.kafka

RECEIPT = {"order_id": 7, "email": "a@example.com", "amount_cents": 1999}


@dataclass(frozen=True, kw_only=True)
class Site:
    url: str
    relays: RelayState


@pytest.fixture
def prefix(unique: str) -> str:
    """A prefix of this test's own: neither its queue's topics nor its
    ``_outbox_relays`` topic exist until the test (or the relay) creates them."""
    return f"od{unique}"


@pytest.fixture
def site(kafka: KafkaSettings, prefix: str) -> Iterator[Site]:
    """The dashboard as ``leasekeeper dashboard`` serves it, reading from the start."""
    fleet, relays = FleetState(), RelayState()
    dashboard = Dashboard(
        fleet=fleet,
        relays=relays,
        kafka=KafkaView(kafka, prefix),
        actions=Actions(kafka=kafka, prefix=prefix, codec=EnvelopeCodec(SchemaRegistry())),
        policy=AccessPolicy(token="t0ken"),
    )
    server = DashboardServer(dashboard, "127.0.0.1", 0)
    reader = FleetReader(kafka, prefix, fleet, relays=relays)
    reader.start()
    server.start()
    yield Site(url=f"http://127.0.0.1:{server.port}", relays=relays)
    server.stop()
    reader.stop()


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as response:
        return str(response.read().decode())


def relays_shown(site: Site) -> list[dict[str, Any]]:
    shown: list[dict[str, Any]] = json.loads(get(f"{site.url}/api/overview"))["outbox_relays"]
    return shown


def start_relay(dsn: str, kafka: KafkaSettings, prefix: str, log: Path) -> subprocess.Popen[bytes]:
    cmd = [
        str(Path(sys.executable).with_name("producer")), "outbox", "relay", "--dsn", dsn,
        "--bootstrap", kafka.bootstrap, "--topic-prefix", prefix,
        "--poll-interval", "0.2", "--publish-interval", "0.3",
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)


def test_the_dashboard_shows_rows_waiting_and_the_lag_until_they_are_relayed(
    pg_dsn: str, kafka: KafkaSettings, prefix: str, site: Site, unique: str, tmp_path: Path
) -> None:
    """Rows for a queue whose topics do not exist stay in job_outbox (the active
    relay keeps them and tries again); once the topics exist they go, and the
    dashboard's figures follow, for the active relay and the standby alike. A
    clean stop removes a relay from the page."""
    init_schema(pg_dsn)
    queue = f"q{unique}"
    with psycopg.connect(pg_dsn) as conn:
        requests = [
            JobRequest(queue=queue, type="send_receipt", payload=RECEIPT, tenant_id="acme")
            for _ in range(3)
        ]
        Outbox().stage_many(conn, requests)
    logs = [tmp_path / "relay-0.log", tmp_path / "relay-1.log"]
    relays = [start_relay(pg_dsn, kafka, prefix, log) for log in logs]
    try:
        waiting = wait_for_reports(site, lambda r: r["waiting"] == 3 and r["lag_s"] > 0, logs)
        assert all(r["error"] is None for r in waiting)
        assert {r["database"] for r in waiting} == {f"127.0.0.1:{pg_port(pg_dsn)}/t{unique}"}
        page = get(f"{site.url}/")
        assert "Outbox relays" in page and page.count('<td class="n">3</td>') == 2
        assert "<td>active</td>" in page and "<td>standby</td>" in page

        ensure_queue_topics(kafka, queue, partitions=1, prefix=prefix)
        done = wait_for_reports(site, lambda r: r["waiting"] == 0, logs)
        assert sorted(r["relayed"] for r in done) == [0, 3]

        for relay in relays:
            relay.send_signal(signal.SIGTERM)
            assert relay.wait(60) == 0
        wait_until(lambda: relays_shown(site) == [], 60, "the relays' tombstones")
        assert "Outbox relays" not in get(f"{site.url}/")
    finally:
        for relay in relays:
            if relay.poll() is None:
                relay.kill()
                relay.wait()


def pg_port(dsn: str) -> str:
    return dsn.split("port=", 1)[1].split()[0]


def wait_for_reports(site: Site, holds: Any, logs: list[Path]) -> list[dict[str, Any]]:
    """Both relays' reports, once ``holds`` of each and one of them is active (the
    relays' logs explain a timeout)."""
    found: list[dict[str, Any]] = []

    def shown() -> bool:
        found[:] = [r for r in relays_shown(site) if holds(r)]
        return len(found) == 2 and sorted(r["active"] for r in found) == [False, True]

    def state() -> object:
        return relays_shown(site), [log.read_text()[-1500:] for log in logs]

    wait_until(shown, 90, "both relays' reports", describe=state)
    return found
