"""Prometheus families the example alert rules read: rate limiters, the queue's dead
letters, and each priority class's ready target (docs/alerts/leasekeeper-rules.yml).

Kept beside ``metrics`` (which calls it from the collector) so that these figures
read one snapshot like every other family. Tenant ids are
unbounded, so only the tenant limiters with the most jobs waiting are exported
by name (``TOP_TENANT_LIMITERS``); type limiters are few and all exported.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

TOP_TENANT_LIMITERS = 10
LABELS = ["queue", "limiter", "name"]


def alerting_families(
    snap: dict[str, Any], queue: str, now_ms: int, ready_targets: Mapping[str, float]
) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    """Every limiter's rate, tokens, waiting jobs, parked and dispatched jobs; the DLQ's
    depth and the age of its newest dead letter; each class's ready target."""
    if ready_targets:
        target = GaugeMetricFamily(
            "leasekeeper_class_ready_target_seconds",
            "how long the oldest ready job of a priority class may wait (--ready-target)",
            labels=["queue", "class"],
        )
        for name, seconds in ready_targets.items():
            target.add_metric([queue, name], seconds)
        yield target
    limits = snap.get("limits")
    if limits:
        yield from _limiters(limits["limiters"], queue)
    dead = snap.get("dead_letters")
    if dead:
        yield from _dead_letters(dead, queue, now_ms)


def _limiters(
    views: list[dict[str, Any]], queue: str
) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    tenants = sorted((v for v in views if v["kind"] == "tenant"), key=lambda v: -v["waiting"])
    shown = [v for v in views if v["kind"] == "type"] + tenants[:TOP_TENANT_LIMITERS]
    gauges = {
        "rate_per_s": ("leasekeeper_rate_limit_per_second",
                       "this leasekeeper's share of the limit, in jobs per second"),
        "tokens": ("leasekeeper_rate_limit_tokens", "dispatches the limiter allows right now"),
        "waiting": ("leasekeeper_rate_limit_waiting_jobs",
                    "ready jobs in the window held back by the limiter"),
    }  # fmt: skip
    for key, (name, text) in gauges.items():
        family = GaugeMetricFamily(name, text, labels=LABELS)
        for view in shown:
            family.add_metric([queue, view["kind"], view["key"]], view[key])
        yield family
    counters = {
        "parked": ("leasekeeper_rate_limit_parked",
                   "jobs over a limit parked in a delay tier (no attempt spent)"),
        "dispatched": ("leasekeeper_rate_limit_dispatched",
                       "jobs dispatched under the limiter"),
    }  # fmt: skip
    for key, (name, text) in counters.items():
        counter = CounterMetricFamily(name, text, labels=LABELS)
        for view in shown:
            counter.add_metric([queue, view["kind"], view["key"]], view[key])
        yield counter


def _dead_letters(dead: dict[str, Any], queue: str, now_ms: int) -> Iterator[GaugeMetricFamily]:
    depth = GaugeMetricFamily(
        "leasekeeper_dlq_depth", "dead letters held in the queue's DLQ topic", labels=["queue"]
    )
    depth.add_metric([queue], dead["depth"])
    yield depth
    if dead.get("newest_ms") is not None:
        age = GaugeMetricFamily(
            "leasekeeper_dlq_newest_age_seconds",
            "time since the newest dead letter reached the DLQ (absent while it is empty)",
            labels=["queue"],
        )
        age.add_metric([queue], max(0.0, (now_ms - dead["newest_ms"]) / 1000))
        yield age
