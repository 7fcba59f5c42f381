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

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from jobcore.kafka import KafkaException, KafkaSettings, make_producer
from jobcore.topic_admin import ensure_leasekeepers_topic

__all__ = [
    "FLEET_VERSION",
    "FleetPublisher",
    "PublishConfig",
    "cap_leases",
    "default_instance",
    "fleet_record",
]

log = logging.getLogger(__name__)

FLEET_VERSION = 1
DEFAULT_MAX_LEASES = 200


def default_instance() -> str:
    """Host and process id: unique among the leasekeepers running now."""
    return f"{socket.gethostname()}:{os.getpid()}"


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
        self._wall = wall
        self._stop = threading.Event()
        self._producer = make_producer(config.kafka, **{"linger.ms": 50})
        self._topic = ""
        self._thread = threading.Thread(target=self._run, name="fleet-publisher", daemon=True)

    @property
    def key(self) -> bytes:
        return self._config.instance.encode()

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._publish_once()
            except (KafkaException, RuntimeError) as exc:
                log.warning("publishing the snapshot to the dashboard topic failed: %s", exc)
            self._stop.wait(self._config.interval_s)

    def _publish_once(self) -> None:
        if not self._topic:
            self._topic = ensure_leasekeepers_topic(self._config.kafka, self._config.prefix)
        record = fleet_record(
            self._snapshot(),
            instance=self._config.instance,
            now_ms=round(self._wall() * 1000),
            max_leases=self._config.max_leases,
        )
        self._producer.produce(self._topic, key=self.key, value=json.dumps(record).encode())
        self._producer.poll(0)

    def stop(self) -> None:
        """Stop publishing and write a tombstone: this instance is gone."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        if self._topic:
            try:
                self._producer.produce(self._topic, key=self.key, value=None)
            except KafkaException as exc:
                log.warning("could not withdraw the snapshot: %s", exc)
        self._producer.flush(5)
