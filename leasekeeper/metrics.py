"""Prometheus metrics of a leasekeeper, read from the engine when scraped.

A collector (rather than counters incremented on the hot path) keeps the
engine free of metrics calls: every scrape turns one snapshot into samples.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

COUNTERS = {
    "acked": "jobs acked by workers",
    "nacked": "jobs nacked by workers",
    "released": "jobs released unrun by stopping workers",
    "expired": "leases taken back by the reaper (expired, or past timeout_s)",
    "retried": "failed jobs copied back to the queue for another attempt",
    "dead": "jobs copied to the dead-letter topic",
    "skipped": "fetched jobs skipped as already resolved (after a restart or move)",
    "stale_rejected": "heartbeats, acks and nacks refused for a stale or unknown lease token",
}


class EngineCollector(Collector):
    def __init__(self, snapshot: Callable[[], dict[str, Any]], queue: str) -> None:
        self._snapshot = snapshot
        self._queue = queue

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        snap = self._snapshot()
        for name, text in COUNTERS.items():
            family = CounterMetricFamily(f"leasekeeper_{name}", text, labels=["queue"])
            family.add_metric([self._queue], snap["counters"][name])
            yield family
        yield self._gauge(
            "leasekeeper_ready_jobs", "fetched jobs waiting for dispatch", snap["ready"]
        )
        partitions = snap["partitions"]
        leases = GaugeMetricFamily(
            "leasekeeper_leases_in_flight", "jobs leased to workers", labels=["queue", "partition"]
        )
        unresolved = GaugeMetricFamily(
            "leasekeeper_unresolved_offsets",
            "fetched offsets not yet resolved (holding the commit back)",
            labels=["queue", "partition"],
        )
        lag = GaugeMetricFamily(
            "leasekeeper_commit_gap",
            "highest fetched offset minus committed offset",
            labels=["queue", "partition"],
        )
        for p in partitions:
            labels = [self._queue, str(p["partition"])]
            leases.add_metric(labels, len(p["leases"]))
            unresolved.add_metric(labels, p["unresolved_count"])
            lag.add_metric(labels, max(0, p["highest_fetched"] + 1 - max(p["committed"], 0)))
        yield leases
        yield unresolved
        yield lag

    def _gauge(self, name: str, text: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, text, labels=["queue"])
        family.add_metric([self._queue], value)
        return family


def serve_metrics(snapshot: Callable[[], dict[str, Any]], queue: str, port: int) -> None:
    """Serve ``/metrics`` on loopback ``port`` from a daemon thread."""
    registry = CollectorRegistry()
    registry.register(EngineCollector(snapshot, queue))
    start_http_server(port, addr="127.0.0.1", registry=registry)
