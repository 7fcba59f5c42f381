"""Prometheus families of the floods a leasekeeper reads past (``floods.py``).

One series per flood: its tenant is the label, and there is at most one flood per
partition, so the labels stay bounded by the partitions owned."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily

LABELS = ["queue", "topic", "partition", "tenant"]


def flood_families(snap: dict[str, Any], queue: str, now_ms: int) -> Iterator[GaugeMetricFamily]:
    """Nothing when no flood is read past (the families appear with the first)."""
    floods = snap.get("floods") or []
    if not floods:
        return
    waiting = GaugeMetricFamily("leasekeeper_flood_waiting_jobs",
                                "a flooding tenant's jobs deferred, waiting in Kafka to be "
                                "handed back as it drains", labels=LABELS)  # fmt: skip
    read_past = GaugeMetricFamily("leasekeeper_flood_read_past_records",
                                  "other tenants' records read past a flood since it began",
                                  labels=LABELS)  # fmt: skip
    age = GaugeMetricFamily("leasekeeper_flood_age_seconds",
                            "how long a flood has been read past", labels=LABELS)  # fmt: skip
    for f in floods:
        labels = [queue, f["topic"], str(f["partition"]), f["tenant"]]
        waiting.add_metric(labels, f["waiting"])
        read_past.add_metric(labels, f["read_past"])
        age.add_metric(labels, max(0, now_ms - f["since_ms"]) / 1000)
    yield from (waiting, read_past, age)
