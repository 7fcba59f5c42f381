"""A consumer over the in-memory cluster: group membership with a range assignor,
rebalance callbacks run inside ``consume``/``poll`` (as librdkafka runs them),
positions, pause/resume/seek, commits with metadata."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from jobcore.kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from memkafka.cluster import Cluster
from memkafka.records import MemoryMessage, RefusedPartition, topic_partition

__all__ = ["MemoryConsumer"]

Rebalance = Callable[[Any, list[TopicPartition]], None]
Part = tuple[str, int]
# The longest a consume with no timeout (-1) waits, so a forgotten test fails, not hangs.
FOREVER_S = 60.0


def _state_error(text: str) -> KafkaException:
    return KafkaException(KafkaError(KafkaError._STATE, text))


class MemoryConsumer:
    def __init__(self, cluster: Cluster, config: dict[str, Any]) -> None:
        self._cluster = cluster
        self.group_id: str | None = config.get("group.id")
        self.member_id = cluster.member_id(str(config.get("client.id", "rdkafka")))
        self._reset = str(config.get("auto.offset.reset", "latest"))
        self._on_commit: Callable[[KafkaError | None, list[TopicPartition]], None] | None = (
            config.get("on_commit")
        )
        strategy = str(config.get("partition.assignment.strategy", "range,roundrobin"))
        self._cooperative = strategy.startswith("cooperative")
        self.subscription: list[str] = []
        self._callbacks: dict[str, Rebalance | None] = {}
        self._generation = 0  # the group generation whose assignment this member applied
        self._positions: dict[Part, int] = {}  # the assignment, with each position
        self._paused: set[Part] = set()
        self._answers: list[tuple[KafkaError | None, list[TopicPartition]]] = []
        self._closed = False
        self._lost = False

    # -- membership ----------------------------------------------------------------

    def subscribe(self, topics: list[str], on_assign: Rebalance | None = None,
                  on_revoke: Rebalance | None = None, on_lost: Rebalance | None = None,
                  ) -> None:  # fmt: skip
        if self.group_id is None:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "group.id is not set"))
        self.subscription = list(topics)
        self._callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        self._cluster.join(self.group_id, self)

    def unsubscribe(self) -> None:
        if self.group_id is not None and self.subscription:
            self._leave()

    def _leave(self) -> None:
        assert self.group_id is not None
        self._revoke(sorted(self._positions))
        self.subscription = []
        self._cluster.leave(self.group_id, self)
        self._generation = self._cluster.group(self.group_id).generation

    def _serve_group(self) -> None:
        """Apply a new generation's assignment through the callbacks (eager: revoke
        everything, assign the lot; cooperative: revoke and assign the difference)."""
        if self.group_id is None or not self.subscription:
            return
        with self._cluster.lock:
            group = self._cluster.group(self.group_id)
            if self._generation == group.generation:
                return
            self._generation = group.generation
            new = set(group.assignment.get(self.member_id, []))
        held = set(self._positions)
        if self._cooperative:
            self._revoke(sorted(held - new))
            added = sorted(new - held)
        else:
            self._revoke(sorted(held))
            added = sorted(new)
        partitions = [TopicPartition(t, p) for t, p in added]
        callback = self._callbacks.get("assign")
        if callback is not None:
            callback(self, partitions)
        self.incremental_assign([tp for tp in partitions if (tp.topic, tp.partition) not in
                                 self._positions])  # fmt: skip

    def _revoke(self, parts: list[Part]) -> None:
        if not parts:
            return
        callback = self._callbacks.get("revoke")
        if callback is not None:
            callback(self, [TopicPartition(t, p, self._positions.get((t, p), OFFSET_INVALID))
                            for t, p in parts])  # fmt: skip
        for part in parts:
            self._positions.pop(part, None)
            self._paused.discard(part)

    def fence(self) -> None:
        """The group drops this member (its session expired, a static id took its
        place): at its next poll it hears ``on_lost`` (no commit can be made for
        those partitions any more) and joins again, as librdkafka does."""
        if self.group_id is not None and self.subscription:
            self._lost = True
            self._cluster.leave(self.group_id, self)

    def _serve_loss(self) -> None:
        if not self._lost:
            return
        self._lost = False
        parts = sorted(self._positions)
        callback = self._callbacks.get("lost") or self._callbacks.get("revoke")
        if callback is not None and parts:
            callback(self, [TopicPartition(t, p) for t, p in parts])
        self._positions.clear()
        self._paused.clear()
        assert self.group_id is not None
        self._cluster.join(self.group_id, self)

    # -- assignment ------------------------------------------------------------------

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._positions.clear()
        self._paused.clear()
        self.incremental_assign(partitions)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._positions[(tp.topic, tp.partition)] = self._start(tp)

    def unassign(self) -> None:
        self._positions.clear()
        self._paused.clear()

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._positions.pop((tp.topic, tp.partition), None)
            self._paused.discard((tp.topic, tp.partition))

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in sorted(self._positions)]

    def _start(self, tp: TopicPartition) -> int:
        """Where fetching starts: an offset given, else the commit, else the reset policy."""
        log = self._cluster.log(tp.topic, tp.partition)
        low, high = (log.low, log.high) if log is not None else (0, 0)
        if tp.offset >= 0:
            return int(tp.offset)
        if tp.offset == OFFSET_BEGINNING:
            return low
        if tp.offset == OFFSET_END:
            return high
        commit = (
            None if self.group_id is None
            else self._cluster.committed(self.group_id, tp.topic, tp.partition)
        )  # fmt: skip
        if commit is not None:
            return max(commit[0], low)
        return low if self._reset in ("earliest", "smallest", "beginning") else high

    # -- fetching ----------------------------------------------------------------------

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[MemoryMessage]:
        if self._closed:
            raise RuntimeError("Consumer closed")
        deadline = time.monotonic() + (FOREVER_S if timeout < 0 else timeout)
        while True:
            self._serve_loss()
            self._serve_group()
            self._serve_answers()
            with self._cluster.lock:
                found = self._fetch(num_messages)
                remaining = deadline - time.monotonic()
                if found or remaining <= 0:
                    return found
                self._cluster.changed.wait(remaining)

    def poll(self, timeout: float = -1) -> MemoryMessage | None:
        found = self.consume(1, timeout)
        return found[0] if found else None

    def _fetch(self, limit: int) -> list[MemoryMessage]:
        """Records from the fetchable partitions, taken partition by partition."""
        found: list[MemoryMessage] = []
        for (topic, partition), position in sorted(self._positions.items()):
            if len(found) >= limit:
                break
            log = self._cluster.log(topic, partition)
            if (topic, partition) in self._paused or log is None:
                continue
            records = log.read(max(position, log.low), limit - len(found))
            found += [MemoryMessage.of(topic, partition, r) for r in records]
            if records and records[-1] is not log.records[-1]:
                self._positions[(topic, partition)] = records[-1].offset + 1
            elif position < log.high:  # read to the end, past any compacted tail
                self._positions[(topic, partition)] = log.high
        return found

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._paused.update((tp.topic, tp.partition) for tp in partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._paused.difference_update((tp.topic, tp.partition) for tp in partitions)

    def paused(self) -> list[TopicPartition]:
        """The paused partitions (a memkafka extra: librdkafka has no such call)."""
        return [TopicPartition(t, p) for t, p in sorted(self._paused)]

    def seek(self, partition: TopicPartition) -> None:
        part = (partition.topic, partition.partition)
        if part not in self._positions:
            raise _state_error(f"seek: {part[0]}[{part[1]}] is not assigned")
        self._positions[part] = self._start(partition)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [
            TopicPartition(tp.topic, tp.partition,
                           self._positions.get((tp.topic, tp.partition), OFFSET_INVALID))
            for tp in partitions
        ]  # fmt: skip

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = -1,
                              cached: bool = False) -> tuple[int, int]:  # fmt: skip
        log = self._cluster.log(partition.topic, partition.partition)
        if log is None:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
        return (log.low, log.high)

    def offsets_for_times(self, partitions: list[TopicPartition],
                          timeout: float = -1) -> list[TopicPartition]:  # fmt: skip
        """Per partition, the first offset whose record was written at or after the time
        given as its ``offset`` (epoch ms); -1 when none was, as the broker answers."""
        found = []
        for tp in partitions:
            log = self._cluster.log(tp.topic, tp.partition)
            if log is None:
                raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
            with self._cluster.lock:
                at = next((r.offset for r in log.records if r.timestamp_ms >= tp.offset), -1)
            found.append(TopicPartition(tp.topic, tp.partition, at))
        return found

    # -- commits ---------------------------------------------------------------------------

    def commit(self, message: MemoryMessage | None = None,
               offsets: list[TopicPartition] | None = None, asynchronous: bool = True,
               ) -> list[TopicPartition] | None:  # fmt: skip
        if self.group_id is None:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "group.id is not set"))
        if message is not None:
            offsets = [TopicPartition(message.topic(), message.partition(),
                                      (message.offset() or 0) + 1)]  # fmt: skip
        elif offsets is None:
            offsets = [TopicPartition(t, p, o) for (t, p), o in sorted(self._positions.items())]
        if not offsets:
            raise KafkaException(KafkaError(KafkaError._NO_OFFSET))
        limit = self._cluster.metadata_max_bytes
        # The broker takes at most limit - 1 bytes (test_memkafka_parity.py shows it).
        refused = {id(tp) for tp in offsets if len((tp.metadata or "").encode()) >= limit}
        taken = {(tp.topic, tp.partition): (tp.offset, tp.metadata)
                 for tp in offsets if id(tp) not in refused}  # fmt: skip
        self._cluster.commit(self.group_id, taken)
        answer = [self._answer(tp, id(tp) in refused) for tp in offsets]
        error = KafkaError(KafkaError.OFFSET_METADATA_TOO_LARGE) if refused else None
        if asynchronous:
            self._answers.append((error, answer))
            return None
        if error is not None:
            raise KafkaException(error)
        return answer

    @staticmethod
    def _answer(tp: TopicPartition, refused: bool) -> TopicPartition:
        if not refused:
            return topic_partition(tp.topic, tp.partition, tp.offset, tp.metadata)
        part = RefusedPartition(tp.topic, tp.partition, tp.offset, tp.metadata or "")
        part.refusal = KafkaError(KafkaError.OFFSET_METADATA_TOO_LARGE)
        return part

    def _serve_answers(self) -> None:
        answers, self._answers = self._answers, []
        if self._on_commit is not None:
            for error, partitions in answers:
                self._on_commit(error, partitions)

    def committed(self, partitions: list[TopicPartition], timeout: float = -1,
                  ) -> list[TopicPartition]:  # fmt: skip
        found = []
        for tp in partitions:
            commit = (
                None if self.group_id is None
                else self._cluster.committed(self.group_id, tp.topic, tp.partition)
            )  # fmt: skip
            offset, metadata = commit if commit is not None else (OFFSET_INVALID, None)
            found.append(topic_partition(tp.topic, tp.partition, offset, metadata))
        return found

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        from memkafka.admin import metadata

        return metadata(self._cluster, topic)

    def memberid(self) -> str:
        return self.member_id

    def close(self) -> None:
        """Leave the group (revoking this member's partitions first), as librdkafka does."""
        if self._closed:
            return
        self._lost = False
        if self.group_id is not None and self.subscription:
            self._leave()
        self._serve_answers()
        self._closed = True
