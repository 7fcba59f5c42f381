"""Prometheus metrics of the outbox relay: rows waiting, relay lag, rows set aside,
rows relayed.

Read from the table at scrape time, so every relay (active or standby) reports
the same backlog, and a stuck relay shows as a growing lag.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from producer.outbox.relay import OutboxRelay

__all__ = ["RelayCollector", "serve_metrics"]


class RelayCollector(Collector):
    def __init__(self, relay: OutboxRelay, dsn: str) -> None:
        self._relay = relay
        self._dsn = dsn

    def collect(self) -> Iterator[Metric]:
        try:
            with psycopg.connect(self._dsn, autocommit=True, connect_timeout=5) as conn:
                stats = self._relay.stats(conn)
        except psycopg.Error:
            return  # no database: the scrape shows the relay's metrics missing
        yield GaugeMetricFamily(
            "outbox_rows_waiting", "rows staged in job_outbox, not yet relayed", stats.waiting
        )
        yield GaugeMetricFamily(
            "outbox_lag_seconds", "age of the oldest staged row (0 when none)", stats.lag_s
        )
        yield GaugeMetricFamily(
            "outbox_dead_rows",
            "rows set aside in job_outbox_dead: they wait for `producer outbox dead retry` "
            "or `drop`",
            stats.dead,
        )
        yield GaugeMetricFamily(
            "outbox_relay_active", "1 when this relay holds the lock", int(stats.active)
        )
        yield CounterMetricFamily("outbox_relayed", "rows this relay moved to Kafka", stats.relayed)


def serve_metrics(relay: OutboxRelay, dsn: str, port: int) -> None:
    registry = CollectorRegistry()
    registry.register(RelayCollector(relay, dsn))
    start_http_server(port, addr="127.0.0.1", registry=registry)
