"""Publish one process's live report to a compacted topic every few seconds.

The dashboard learns about leasekeepers and outbox relays the same way: each
process writes a small record keyed by its instance to a compacted topic, and
the dashboard reads the topic whole. This is the part both share: the thread,
the topic created on first use (so a publisher started before anyone created the
topic still works), and the tombstone on a clean stop, which makes a stopped
process disappear at once; one that died ages out by its ``published_at_ms``.
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

__all__ = ["LivePublisher", "LiveTopic", "default_instance"]

log = logging.getLogger(__name__)


def default_instance() -> str:
    """Host and process id: unique among the processes running now."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True, kw_only=True)
class LiveTopic:
    """Where and how often one instance publishes: ``ensure`` creates the topic if
    missing and returns its name."""

    kafka: KafkaSettings
    ensure: Callable[[], str]
    instance: str
    interval_s: float = 3.0
    what: str = "the live report"

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise ValueError(f"publish interval must be > 0 seconds, got {self.interval_s}")


class LivePublisher:
    """A thread that publishes ``record(now_ms)`` every ``interval_s`` until ``stop()``;
    ``on_stop`` releases what ``record`` holds (called once the thread has ended)."""

    def __init__(
        self,
        topic: LiveTopic,
        record: Callable[[int], dict[str, object]],
        wall: Callable[[], float] = time.time,
        name: str = "live-publisher",
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self._topic = topic
        self._record = record
        self._on_stop = on_stop
        self._wall = wall
        self._stop = threading.Event()
        self._producer = make_producer(topic.kafka, **{"linger.ms": 50})
        self._name = ""
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def key(self) -> bytes:
        return self._topic.instance.encode()

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.publish_once()
            except (KafkaException, RuntimeError) as exc:
                log.warning(
                    "publishing %s to the dashboard topic failed: %s", self._topic.what, exc
                )
            self._stop.wait(self._topic.interval_s)

    def publish_once(self) -> None:
        """Create the topic on first use, then produce one record (not awaited)."""
        if not self._name:
            self._name = self._topic.ensure()
        record = self._record(round(self._wall() * 1000))
        self._producer.produce(self._name, key=self.key, value=json.dumps(record).encode())
        self._producer.poll(0)

    def stop(self) -> None:
        """Stop publishing and write a tombstone: this instance is gone."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        if self._on_stop is not None:
            self._on_stop()
        if self._name:
            try:
                self._producer.produce(self._name, key=self.key, value=None)
            except KafkaException as exc:
                log.warning("could not withdraw %s: %s", self._topic.what, exc)
        self._producer.flush(5)
