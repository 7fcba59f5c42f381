"""Prometheus metrics of a leasekeeper, read from the engine when scraped.

A collector (rather than counters incremented on the hot path) keeps the
engine free of metrics calls: every scrape turns one snapshot into samples.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from leasekeeper.core.context import counter_help
from leasekeeper.deferral.metrics import flood_families
from leasekeeper.views.alerting_metrics import alerting_families

# Every field of the engine's Counters is exported (a new counter needs no edit here),
# and the RPC layer's count of clamped retry_after_s values beside them.
COUNTERS = {
    **counter_help(),
    "invalid_retry_after": "nacks whose retry_after_s was NaN, negative or too long (clamped)",
}

_log = logging.getLogger(__name__)

OUTBOX_COUNTERS = {
    "delivered": "durable copies delivered (retries, dead letters, hops, dedupe claims)",
    "transient_failures": "copy sends that failed transiently and were retried after a backoff",
    "shrunk": "copies too large for their topic, dead-lettered with less history or no payload",
    "blocked_events": "copies that became blocked (not authorised, unknown topic): alerts raised",
    "schema_waits": "copy sends put off because the Schema Registry could not give a schema",
    "lane_waits": "held ordered jobs' copies home put off until their job was read from the lane",
    "status_dropped": (
        "job status records dropped (not authorised, unknown status topic, or the topic down "
        "while the records waiting for it reached their cap)"
    ),
    "results_dropped": (
        "job results Kafka refused (not authorised, unknown results topic): dropped, the "
        "job resolved as acked"
    ),
}


# ``leasekeeper_breaker_state`` values, as the alert rules read them (2 is open).
BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}

# Tenants exported by name (the busiest); the others are summed as tenant="other".
TOP_TENANTS = 10


class EngineCollector(Collector):
    def __init__(
        self,
        snapshot: Callable[[], dict[str, Any]],
        queue: str,
        ready_targets: Mapping[str, float] | None = None,
    ) -> None:
        """``ready_targets``: each priority class's ready target, exported for alerts."""
        self._snapshot = snapshot
        self._queue = queue
        self._ready_targets = dict(ready_targets or {})

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        snap = self._snapshot()
        for name, text in COUNTERS.items():
            family = CounterMetricFamily(f"leasekeeper_{name}", text, labels=["queue"])
            value = snap["counters"].get(name)
            if value is not None:  # a counter the snapshot lacks yields no family
                family.add_metric([self._queue], value)
                yield family
        yield self._gauge(
            "leasekeeper_ready_jobs", "fetched jobs waiting for dispatch", snap["ready"]
        )
        yield from self._partitions(snap["partitions"])
        yield from self._retry_path(snap)
        if "outbox" in snap:
            yield from self._outbox(snap["outbox"])
        yield from self._control(snap)
        yield from self._fairness(snap)
        now_ms = int(time.time() * 1000)
        yield from alerting_families(snap, self._queue, now_ms, self._ready_targets)
        yield from flood_families(snap, self._queue, now_ms)
        yield from self._breakers(snap)

    def _breakers(self, snap: dict[str, Any]) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """Each job type's breaker: its state (0 closed, 1 half-open, 2 open: alert on 2
        lasting), the failure rate in its window, and the dispatches it refused (each
        one a job parked without spending an attempt)."""
        breakers = snap.get("breakers") or []
        labels = ["queue", "job_type"]
        state = GaugeMetricFamily("leasekeeper_breaker_state",
                                  "circuit breaker per job type: 0 closed, 1 half-open, 2 open",
                                  labels=labels)  # fmt: skip
        rate = GaugeMetricFamily("leasekeeper_breaker_failure_rate",
                                 "share of failed calls in the breaker's sliding window",
                                 labels=labels)  # fmt: skip
        parked = CounterMetricFamily("leasekeeper_breaker_parked",
                                     "dispatches refused by the breaker: jobs parked unrun",
                                     labels=labels)  # fmt: skip
        for view in breakers:
            values = [self._queue, view["type"]]
            state.add_metric(values, BREAKER_STATES.get(view["state"], 0))
            rate.add_metric(values, view["failure_rate"])
            parked.add_metric(values, view["parked"])
        if breakers:
            yield state
            yield rate
            yield parked

    def _fairness(self, snap: dict[str, Any]) -> Iterator[GaugeMetricFamily]:
        """Per priority class, and the busiest tenants only (TOP_TENANTS, the rest summed
        as tenant="other"): tenant ids are unbounded, a label per tenant is not."""
        classes = snap.get("classes") or []
        ready = GaugeMetricFamily("leasekeeper_class_ready_jobs",
                                  "ready jobs in the window per priority class",
                                  labels=["queue", "class"])  # fmt: skip
        oldest = GaugeMetricFamily("leasekeeper_class_oldest_ready_age_seconds",
                                   "age of the oldest ready job per priority class, "
                                   "since it was due (enqueued, or its run_at)",
                                   labels=["queue", "class"])  # fmt: skip
        for view in classes:
            ready.add_metric([self._queue, view["name"]], view["ready"])
            age = view.get("oldest_ready_age_ms")
            oldest.add_metric([self._queue, view["name"]], 0 if age is None else age / 1000)
        if classes:
            yield ready
            yield oldest
        tenants = snap.get("tenants")
        if tenants is not None:
            yield from self._top_tenants(tenants)

    def _top_tenants(self, tenants: list[dict[str, Any]]) -> Iterator[GaugeMetricFamily]:
        helps = {
            "ready": "ready jobs of the busiest tenants",
            "in_flight": "jobs in flight of the busiest tenants",
            "overflow": "jobs of the busiest tenants moved to the overflow lane and not run yet",
        }
        for key, text in helps.items():
            family = GaugeMetricFamily(
                f"leasekeeper_tenant_{key}_jobs", text, labels=["queue", "tenant"]
            )
            for view in tenants[:TOP_TENANTS]:
                family.add_metric([self._queue, view["tenant"]], view.get(key, 0))
            rest = sum(v.get(key, 0) for v in tenants[TOP_TENANTS:])
            family.add_metric([self._queue, "other"], rest)
            yield family

    def _partitions(self, partitions: list[dict[str, Any]]) -> Iterator[GaugeMetricFamily]:
        """One series per (topic, partition): a leasekeeper holds partition 0 of the
        queue and of every tier topic, so without ``topic`` those series would repeat."""
        labels = ["queue", "topic", "partition"]
        leases = GaugeMetricFamily(
            "leasekeeper_leases_in_flight", "jobs leased to workers", labels=labels
        )
        unresolved = GaugeMetricFamily(
            "leasekeeper_unresolved_offsets",
            "fetched offsets not yet resolved (holding the commit back)",
            labels=labels,
        )
        gap = GaugeMetricFamily(
            "leasekeeper_commit_gap", "highest fetched offset minus committed offset", labels=labels
        )
        uncommitted = GaugeMetricFamily(
            "leasekeeper_uncommitted_jobs",
            "finished jobs no accepted commit describes yet (a move would run them again; "
            "leasing stops at --max-uncommitted over all partitions)",
            labels=labels,
        )
        for p in sorted(partitions, key=lambda p: (p["topic"], p["partition"])):
            values = [self._queue, p["topic"], str(p["partition"])]
            leases.add_metric(values, len(p["leases"]))
            unresolved.add_metric(values, p["unresolved_count"])
            gap.add_metric(values, max(0, p["highest_fetched"] + 1 - max(p["committed"], 0)))
            uncommitted.add_metric(values, p.get("uncommitted", 0))
        yield leases
        yield unresolved
        yield gap
        yield uncommitted

    def _control(self, snap: dict[str, Any]) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """Control-state size and the start-up read: the memory and start-up cost of
        cancellations and dedupe keys, which grow with traffic until pruned."""
        control = snap.get("control")
        if not control:
            return
        yield self._gauge(
            "leasekeeper_control_cancellations",
            "cancellations held in memory (pruned after the control topic's retention)",
            control["cancellations"],
        )
        yield self._gauge(
            "leasekeeper_control_dedupe_claims",
            "dedupe keys held in memory (pruned after the dedupe window)",
            control["dedupe_claims"],
        )
        pruned = CounterMetricFamily(
            "leasekeeper_control_pruned",
            "cancellations and dedupe keys dropped from memory past their window",
            labels=["queue"],
        )
        pruned.add_metric([self._queue], control["pruned"])
        yield pruned
        if control.get("catch_up_s") is not None:
            yield self._gauge(
                "leasekeeper_control_catch_up_seconds",
                "time the start-up read of the control and dedupe topics took",
                control["catch_up_s"],
            )

    def _retry_path(
        self, snap: dict[str, Any]
    ) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """Where retries wait, and whether the budget holds them back.

        In an outage these are the signals to alert on: deferrals rising mean
        retries exceed their share of the queue's throughput (the budget is
        protecting the dependency); delayed jobs and held tier partitions show
        how much work waits on backoff. A field the snapshot lacks (an older
        engine) yields no family rather than a misleading zero.
        """
        budget = snap.get("retry_budget")
        if budget:
            yield self._gauge(
                "leasekeeper_retry_budget_allowed",
                "retries the budget allows in its current window",
                budget["allowed_in_window"],
            )
            yield self._gauge(
                "leasekeeper_retry_budget_retries_in_window",
                "retries counted in the budget's current window",
                budget["retries_in_window"],
            )
            deferred = CounterMetricFamily(
                "leasekeeper_retry_budget_retries_deferred",
                "retries the budget moved to a later window (delayed, never dropped)",
                labels=["queue"],
            )
            deferred.add_metric([self._queue], budget["retries_deferred"])
            yield deferred
        if "delayed" in snap:
            yield self._gauge(
                "leasekeeper_delayed_jobs",
                "jobs waiting in the in-memory timer for the rest of a sub-tier delay",
                snap["delayed"],
            )
        if "held_tiers" in snap:
            yield self._gauge(
                "leasekeeper_held_tier_partitions",
                "delay-tier partitions paused until their head record is due",
                len(snap["held_tiers"]),
            )
        if "switch_holds" in snap:
            holds = CounterMetricFamily(
                "leasekeeper_switch_holds",
                "times a job its producer diverted to the overflow lane waited for its "
                "tenant's older ready jobs (its switch)",
                labels=["queue"],
            )
            holds.add_metric([self._queue], snap["switch_holds"])
            yield holds

    def _outbox(self, outbox: dict[str, Any]) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """The durable copies on their way to Kafka. Alert on ``copies_blocked`` above
        zero: a copy that cannot be produced (unauthorised, unknown topic) holds its
        partition's commit and fetching until an operator fixes the topic or its ACL."""
        yield self._gauge(
            "leasekeeper_copies_pending",
            "retry, dead-letter, hop and dedupe copies waiting to be sent (backoff included)",
            outbox["pending"],
        )
        yield self._gauge(
            "leasekeeper_copies_in_flight",
            "copies produced and awaiting their delivery report",
            outbox["in_flight"],
        )
        blocked = GaugeMetricFamily(
            "leasekeeper_copies_blocked",
            "copies that cannot be produced (not authorised, unknown topic): the partition stops",
            labels=["queue", "topic", "partition"],
        )
        per_partition: dict[tuple[str, str], int] = {}
        for copy in outbox["blocked"]:
            key = (copy["topic"], str(copy["partition"]))
            per_partition[key] = per_partition.get(key, 0) + 1
        for (topic, partition), count in sorted(per_partition.items()):
            blocked.add_metric([self._queue, topic, partition], count)
        yield blocked
        for name, text in OUTBOX_COUNTERS.items():
            family = CounterMetricFamily(f"leasekeeper_copies_{name}", text, labels=["queue"])
            family.add_metric([self._queue], outbox["counters"].get(name, 0))
            yield family

    def _gauge(self, name: str, text: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, text, labels=["queue"])
        family.add_metric([self._queue], value)
        return family


def serve_metrics(
    snapshot: Callable[[], dict[str, Any]],
    queue: str,
    port: int,
    ready_targets: Mapping[str, float] | None = None,
) -> None:
    """Serve ``/metrics`` on loopback ``port`` from a daemon thread."""
    registry = CollectorRegistry()
    registry.register(EngineCollector(snapshot, queue, ready_targets))
    start_http_server(port, addr="127.0.0.1", registry=registry)
    _log.info("metrics: http://127.0.0.1:%d/metrics", port)
