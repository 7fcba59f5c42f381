"""Reads a queue's control and dedupe topics whole, into a ``ControlState``.

Every leasekeeper reads every partition of both (they are small and
compacted), without a consumer group: a cancellation or a dedupe key applies
wherever the job waits, and survives restarts and partition moves because it
lives in Kafka. At start the feed reads to the end before any job is
dispatched; then the consumer loop polls it without blocking. Each poll and
the end of the catch-up prune what the state no longer needs (by the injected
wall clock: the records carry wall-clock times).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

from jobcore.control import Cancellation, DedupeClaim
from jobcore.kafka import (
    OFFSET_BEGINNING,
    KafkaSettings,
    Message,
    TopicPartition,
    make_admin,
    make_consumer,
)
from jobcore.topics import QueueTopics
from leasekeeper.core.control_state import ControlState
from leasekeeper.views.snapshots import ControlSnapshot

log = logging.getLogger(__name__)


class ControlFeed:
    """Reads the control and dedupe topics into a ``ControlState`` (a ``Feed``)."""

    what = "the control topics"

    def __init__(
        self,
        *,
        settings: KafkaSettings,
        topics: QueueTopics,
        state: ControlState,
        on_change: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._topics = topics
        self._state = state
        self._on_change = on_change
        self._clock = clock
        self._catch_up_s: float | None = None
        self._catch_up_records = 0
        self._settings = settings
        self._consumer = make_consumer(settings, f"control-reader-{uuid.uuid4().hex[:8]}")
        self._partitions: list[TopicPartition] | None = None

    def _assigned(self) -> list[TopicPartition]:
        """Assign every partition of both topics once, from the beginning; a retried
        catch-up continues from where the last try got to."""
        if self._partitions is None:
            metadata = make_admin(self._settings).list_topics(timeout=10).topics
            self._partitions = [
                TopicPartition(topic, p, OFFSET_BEGINNING)
                for topic in (self._topics.control, self._topics.dedupe)
                if topic in metadata
                for p in metadata[topic].partitions
            ]
            self._consumer.assign(self._partitions)
        return self._partitions

    def catch_up(self, timeout_s: float = 60.0) -> None:
        """Read everything written so far; raises if that takes longer than ``timeout_s``
        (or a Kafka error while the cluster is unreachable: the caller retries)."""
        partitions = self._assigned()
        ends = {
            (tp.topic, tp.partition): self._consumer.get_watermark_offsets(tp, timeout=10)
            for tp in partitions
        }
        started = time.monotonic()
        deadline = started + timeout_s
        while not self._reached(partitions, ends):
            if time.monotonic() > deadline:
                raise TimeoutError(f"control topics not read within {timeout_s}s")
            for message in self._consumer.consume(500, timeout=0.2):
                if message.error() is None:
                    self._apply(message)
                    self._catch_up_records += 1
        self._state.prune(self._now_ms())
        self._catch_up_s = time.monotonic() - started

    def _reached(
        self, partitions: list[TopicPartition], ends: dict[tuple[str, int], tuple[int, int]]
    ) -> bool:
        """Every partition read up to its end offset. A partition whose records all
        expired or were deleted (low == high > 0) has nothing to read: its position
        never becomes valid, and waiting for it would never end."""
        for tp in self._consumer.position(partitions):
            low, high = ends.get((tp.topic, tp.partition), (0, 0))
            if high > low and tp.offset < high:
                return False
        return True

    def poll(self) -> None:
        """Apply what arrived since the last call, without waiting."""
        messages = self._consumer.consume(100, timeout=0)
        changed = False
        for message in messages:
            if message.error() is None:
                self._apply(message)
                changed = True
        self._state.prune(self._now_ms())
        if changed:
            self._on_change()

    def _apply(self, message: Message) -> None:
        value, key = message.value(), message.key()
        control = message.topic() == self._topics.control
        if value is None:
            self._forget(control, key)
            return
        try:
            if control:
                self._state.cancel(Cancellation.decode(value), self._now_ms())
            else:
                self._state.remember(DedupeClaim.decode(value), self._now_ms())
        except (ValueError, KeyError) as exc:
            log.warning("ignoring a malformed record on %s: %s", message.topic(), exc)

    def _forget(self, control: bool, key: bytes | None) -> None:
        """A tombstone: the key's fact was withdrawn (compaction will drop it too)."""
        if key is None:
            return
        if control:
            self._state.uncancel(key.decode(errors="replace"))
        else:
            self._state.forget_claim(key)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def snapshot(self) -> ControlSnapshot:
        cancellations, claims = self._state.sizes()
        return ControlSnapshot(
            cancellations=cancellations,
            dedupe_claims=claims,
            pruned=self._state.pruned,
            catch_up_s=None if self._catch_up_s is None else round(self._catch_up_s, 3),
            catch_up_records=self._catch_up_records,
        )

    def close(self) -> None:
        self._consumer.close()
