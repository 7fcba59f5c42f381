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
    """Rows for a queue whose topics do not exist stay in job_outbox (the relay
    keeps them and tries again); once the topics exist they go, and the
    dashboard's figures follow. A clean stop removes the relay from the page."""
    init_schema(pg_dsn)
    queue = f"q{unique}"
    with psycopg.connect(pg_dsn) as conn:
        Outbox().stage_many(
            conn,
            [
                JobRequest(queue=queue, type="send_receipt", payload=RECEIPT, tenant_id="acme")
                for _ in range(3)
            ],
        )
    log = tmp_path / "relay.log"
    relay = start_relay(pg_dsn, kafka, prefix, log)
    try:
        mine = wait_for_report(site, lambda r: r["waiting"] == 3 and r["lag_s"] > 0, log)
        assert mine["active"] is True and mine["error"] is None
        assert mine["database"].endswith(f"/{pg_dsn.rsplit('dbname=', 1)[1]}")
        page = get(f"{site.url}/")
        assert "Outbox relays" in page and '<td class="n">3</td>' in page

        ensure_queue_topics(kafka, queue, partitions=1, prefix=prefix)
        done = wait_for_report(site, lambda r: r["waiting"] == 0, log)
        assert done["relayed"] == 3 and done["error"] is None

        relay.send_signal(signal.SIGTERM)
        assert relay.wait(60) == 0
        wait_until(lambda: relays_shown(site) == [], 60, "the relay's tombstone")
        assert "Outbox relays" not in get(f"{site.url}/")
    finally:
        if relay.poll() is None:
            relay.kill()
            relay.wait()


def wait_for_report(site: Site, holds: Any, log: Path) -> dict[str, Any]:
    """The one relay's report, once ``holds`` of it (the relay's log explains a timeout)."""
    found: list[dict[str, Any]] = []

    def shown() -> bool:
        found[:] = [r for r in relays_shown(site) if holds(r)]
        return bool(found)

    wait_until(
        shown,
        90,
        "the relay's report",
        describe=lambda: (relays_shown(site), log.read_text()[-2000:]),
    )
    return found[0]
