"""The dashboard's copy of ``jobs._leasekeepers``: the latest snapshot of each leasekeeper.

``FleetState`` is the pure part (apply records, age them out, derive rates);
``FleetReader`` is the thread that feeds it from Kafka, the way a Kafka Streams
table is materialised from a compacted topic. The same thread feeds the outbox
relays' reports (``jobs._outbox_relays``) to ``relays_view.RelayState``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from jobcore.kafka import OFFSET_BEGINNING, KafkaError, KafkaSettings, TopicPartition, make_consumer
from jobcore.topics import leasekeepers_topic, outbox_relays_topic

__all__ = ["FleetReader", "FleetState", "RatePoint"]

log = logging.getLogger(__name__)

# A leasekeeper that published nothing for this long is shown as gone (it died).
STALE_AFTER_S = 30.0
HISTORY = 60


@dataclass(frozen=True, kw_only=True)
class RatePoint:
    """Jobs per second of one queue between two snapshots: processed and failed."""

    at_ms: int
    processed: float
    failed: float


def _totals(records: list[dict[str, Any]]) -> tuple[int, int]:
    processed = failed = 0
    for record in records:
        counters = record["snapshot"].get("counters", {})
        processed += int(counters.get("acked", 0))
        failed += int(counters.get("nacked", 0)) + int(counters.get("expired", 0))
    return processed, failed


class FleetState:
    """Latest record per instance, plus a short rate history per queue."""

    def __init__(self, stale_after_s: float = STALE_AFTER_S) -> None:
        self._records: dict[str, dict[str, Any]] = {}
        self._stale_after_ms = stale_after_s * 1000
        self._last: dict[str, tuple[int, int, int]] = {}
        self._history: dict[str, deque[RatePoint]] = {}
        self._lock = threading.Lock()

    def apply(self, key: str, value: bytes | None) -> None:
        """One record of the topic; a tombstone removes the instance."""
        with self._lock:
            if value is None:
                self._records.pop(key, None)
                return
            try:
                record = json.loads(value)
            except ValueError:
                return
            if isinstance(record, dict) and int(record.get("version", 0)) >= 1:
                self._records[key] = record

    def current(self, now_ms: int) -> list[dict[str, Any]]:
        """Live leasekeepers (published recently), by queue then instance."""
        with self._lock:
            live = [
                r
                for r in self._records.values()
                if now_ms - int(r["published_at_ms"]) <= self._stale_after_ms
            ]
        return sorted(live, key=lambda r: (str(r.get("queue")), str(r.get("instance"))))

    def queues(self, now_ms: int) -> list[str]:
        return sorted({str(r.get("queue")) for r in self.current(now_ms)})

    def sample(self, now_ms: int) -> None:
        """Add a rate point per queue from the counters' growth since the last sample.

        A leasekeeper that restarts resets its counters; a negative step counts as 0."""
        live = self.current(now_ms)
        for queue in {str(r.get("queue")) for r in live}:
            processed, failed = _totals([r for r in live if r.get("queue") == queue])
            last = self._last.get(queue)
            self._last[queue] = (now_ms, processed, failed)
            if last is None or now_ms <= last[0]:
                continue
            seconds = (now_ms - last[0]) / 1000
            point = RatePoint(
                at_ms=now_ms,
                processed=max(0, processed - last[1]) / seconds,
                failed=max(0, failed - last[2]) / seconds,
            )
            self._history.setdefault(queue, deque(maxlen=HISTORY)).append(point)

    def history(self, queue: str) -> list[RatePoint]:
        return list(self._history.get(queue, ()))


class _Table(Protocol):
    def apply(self, key: str, value: bytes | None) -> None: ...


class FleetReader:
    """Consumes ``jobs._leasekeepers`` from the beginning into a ``FleetState``, and
    ``jobs._outbox_relays`` into ``relays`` when given.

    Both topics are assigned even when they do not exist yet: the first relay or
    leasekeeper creates its topic, and the consumer picks it up from its start."""

    def __init__(
        self,
        settings: KafkaSettings,
        prefix: str,
        state: FleetState,
        wall: Callable[[], float] = time.time,
        sample_every_s: float = 3.0,
        relays: _Table | None = None,
    ) -> None:
        self._settings = settings
        self._topic = leasekeepers_topic(prefix)
        self._tables: dict[str, _Table] = {self._topic: state}
        if relays is not None:
            self._tables[outbox_relays_topic(prefix)] = relays
        self.state = state
        self._wall = wall
        self._sample_every_s = sample_every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet-reader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        consumer = make_consumer(self._settings, f"dashboard.{uuid.uuid4().hex}")
        try:
            consumer.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in self._tables])
            next_sample = 0.0
            while not self._stop.is_set():
                for message in consumer.consume(num_messages=500, timeout=0.5):
                    self._apply(message)
                if time.monotonic() >= next_sample:
                    self.state.sample(round(self._wall() * 1000))
                    next_sample = time.monotonic() + self._sample_every_s
        finally:
            consumer.close()

    def _apply(self, message: Any) -> None:
        error = message.error()
        if error is not None:
            if error.code() not in (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART):
                log.debug("reading %s: %s", message.topic(), error)
            return
        key, table = message.key(), self._tables.get(message.topic())
        if key is not None and table is not None:
            table.apply(key.decode(errors="replace"), message.value())
