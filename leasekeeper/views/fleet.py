"""Each leasekeeper publishes its snapshot to ``jobs._leasekeepers`` every few seconds.

The dashboard reads that one compacted topic and so sees every leasekeeper on
every host without configuration, and without a connection to any of them.
A record is keyed by instance, carries a format ``version``, and is capped in
size: beyond ``max_leases`` leases it lists the oldest and says how many it
left out (the per-tenant counts still cover all of them). A clean stop writes
a tombstone, so a stopped leasekeeper disappears from the page at once; one
that died ages out by its ``published_at_ms``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from jobcore.kafka import KafkaSettings
from jobcore.live_topic import LivePublisher, LiveTopic, default_instance
from jobcore.topic_admin import ensure_leasekeepers_topic

__all__ = [
    "FLEET_VERSION",
    "FleetPublisher",
    "PublishConfig",
    "cap_leases",
    "default_instance",
    "fleet_record",
]

FLEET_VERSION = 1
DEFAULT_MAX_LEASES = 200


def cap_leases(snapshot: dict[str, object], max_leases: int) -> dict[str, object]:
    """The snapshot with at most ``max_leases`` leases (the oldest), and
    ``leases_total`` / ``leases_omitted`` saying what was cut."""
    partitions = snapshot.get("partitions")
    if not isinstance(partitions, list):
        return snapshot
    leases = [lease for p in partitions for lease in p.get("leases", [])]
    kept = {id(x) for x in sorted(leases, key=lambda x: -float(x["age_s"]))[:max_leases]}
    capped = [
        {**p, "leases": [x for x in p.get("leases", []) if id(x) in kept]} for p in partitions
    ]
    return {
        **snapshot,
        "partitions": capped,
        "leases_total": len(leases),
        "leases_omitted": max(0, len(leases) - max_leases),
    }


def fleet_record(
    snapshot: dict[str, object], *, instance: str, now_ms: int, max_leases: int
) -> dict[str, object]:
    """The versioned record one leasekeeper publishes about itself."""
    return {
        "version": FLEET_VERSION,
        "instance": instance,
        "queue": snapshot.get("queue"),
        "published_at_ms": now_ms,
        "snapshot": cap_leases(snapshot, max_leases),
    }


@dataclass(frozen=True, kw_only=True)
class PublishConfig:
    kafka: KafkaSettings
    prefix: str
    instance: str
    interval_s: float = 3.0
    max_leases: int = DEFAULT_MAX_LEASES


class FleetPublisher:
    """A thread that publishes ``snapshot()`` every ``interval_s`` until ``stop()``."""

    def __init__(
        self,
        config: PublishConfig,
        snapshot: Callable[[], dict[str, object]],
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._snapshot = snapshot
        topic = LiveTopic(
            kafka=config.kafka,
            ensure=lambda: ensure_leasekeepers_topic(config.kafka, config.prefix),
            instance=config.instance,
            interval_s=config.interval_s,
            what="the snapshot",
        )
        self._publisher = LivePublisher(topic, self._record, wall, name="fleet-publisher")

    @property
    def key(self) -> bytes:
        return self._publisher.key

    def start(self) -> None:
        self._publisher.start()

    def _record(self, now_ms: int) -> dict[str, object]:
        return fleet_record(
            self._snapshot(),
            instance=self._config.instance,
            now_ms=now_ms,
            max_leases=self._config.max_leases,
        )

    def stop(self) -> None:
        """Stop publishing and write a tombstone: this instance is gone."""
        self._publisher.stop()
