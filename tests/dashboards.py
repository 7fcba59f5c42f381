"""A dashboard served in the test's process over the test's system: its Job page and
``/api/job`` read the same Kafka as the system's leasekeeper."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from leasekeeper.dashboard.access import AccessPolicy
from leasekeeper.dashboard.actions import Actions
from leasekeeper.dashboard.fleet_view import FleetReader, FleetState
from leasekeeper.dashboard.kafka_view import KafkaView
from leasekeeper.dashboard.server import Dashboard, DashboardServer
from schemas.codec import EnvelopeCodec, SchemaRegistry
from tests.apps.recording import SCHEMAS
from tests.system import System


@contextmanager
def served(system: System) -> Iterator[str]:
    """The dashboard's base URL while it runs (token ``t0ken`` for actions)."""
    prefix = system.topics.prefix
    fleet = FleetState()
    site = Dashboard(
        fleet=fleet,
        kafka=KafkaView(system.kafka, prefix),
        actions=Actions(
            kafka=system.kafka,
            prefix=prefix,
            codec=EnvelopeCodec(SchemaRegistry(extra_dirs=[SCHEMAS])),
        ),
        policy=AccessPolicy(token="t0ken"),
    )
    server = DashboardServer(site, "127.0.0.1", 0)
    reader = FleetReader(system.kafka, prefix, fleet)
    reader.start()
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()
        reader.stop()


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as response:
        return str(response.read().decode())
