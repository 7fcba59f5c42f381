"""The in-memory cluster: topics of partitioned logs, consumer groups and their
commits, shared by every client a test builds from it.

One lock guards it all; a condition wakes consumers waiting for records. Client
callbacks (delivery reports, rebalances, commit answers) are run by the clients
outside the lock, on the thread that polls, as librdkafka does.
"""

from __future__ import annotations

import bisect
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jobcore.client_hook import install_clients
from jobcore.kafka import KafkaError
from memkafka.records import Headers, StoredRecord

if TYPE_CHECKING:
    from memkafka.admin import MemoryAdmin
    from memkafka.consumer import MemoryConsumer
    from memkafka.producer import MemoryProducer

__all__ = ["Cluster", "Fault", "PartitionLog", "installed"]


class PartitionLog:
    """An append-only log: offsets only grow; compaction and record deletion leave holes."""

    def __init__(self) -> None:
        self.records: list[StoredRecord] = []
        self.low = 0  # the log start offset
        self.high = 0  # the offset the next record gets

    def append(self, key: bytes | None, value: bytes | None, headers: Headers | None,
               timestamp_ms: int) -> int:  # fmt: skip
        offset = self.high
        self.records.append(StoredRecord(offset, key, value, headers, timestamp_ms))
        self.high += 1
        return offset

    def read(self, start: int, limit: int) -> list[StoredRecord]:
        """Up to ``limit`` records from ``start`` on (the next one after a hole)."""
        i = bisect.bisect_left(self.records, start, key=lambda r: r.offset)
        return self.records[i : i + limit]

    def delete_before(self, offset: int) -> None:
        self.low = max(self.low, min(offset, self.high))
        self.records = [r for r in self.records if r.offset >= self.low]

    def compact(self) -> None:
        """Keep the last record of each key; tombstones (and keyless records) go too."""
        last = {r.key: r.offset for r in self.records}
        self.records = [
            r for r in self.records if r.key is not None and last[r.key] == r.offset and r.value
        ]


@dataclass
class Group:
    """A consumer group: its members in join order, their assignment, its commits."""

    members: list[MemoryConsumer] = field(default_factory=list)
    generation: int = 0
    assignment: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    commits: dict[tuple[str, int], tuple[int, str | None]] = field(default_factory=dict)


@dataclass
class Fault:
    """The next ``count`` produces to a topic fail with ``code``: raised by
    ``produce()`` when ``raised``, else in the delivery report."""

    code: int
    count: int = 1
    raised: bool = False


class Cluster:
    """Topics, groups and commits in memory. ``clock`` gives record timestamps (epoch
    seconds); ``auto_create`` makes a topic of ``default_partitions`` on first use
    (off by default, as the project creates its topics); a commit's metadata of
    ``metadata_max_bytes`` or more is refused (the broker's ``offset.metadata.max.bytes``)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        auto_create: bool = False,
        default_partitions: int = 1,
        seed: int = 0,
        metadata_max_bytes: int = 4096,
    ) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.clock = clock
        self.auto_create = auto_create
        self.default_partitions = default_partitions
        self.metadata_max_bytes = metadata_max_bytes
        self.rng = random.Random(seed)
        self.cluster_id = f"memkafka-{seed}"
        self.topics: dict[str, list[PartitionLog]] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.groups: dict[str, Group] = {}
        self.faults: dict[str, Fault] = {}
        self._members = 0

    # -- topics ------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None,
                     ) -> bool:  # fmt: skip
        """False if it exists already (its partition count is left alone)."""
        if partitions < 1:
            raise ValueError(f"topic {name}: partitions must be at least 1, not {partitions}")
        with self.lock:
            if name in self.topics:
                return False
            self.topics[name] = [PartitionLog() for _ in range(partitions)]
            self.topic_configs[name] = dict(config or {})
            return True

    def delete_topic(self, name: str) -> bool:
        with self.lock:
            self.topic_configs.pop(name, None)
            return self.topics.pop(name, None) is not None

    def partitions(self, topic: str) -> list[PartitionLog] | None:
        """The topic's logs; created now if ``auto_create``; None if unknown."""
        with self.lock:
            logs = self.topics.get(topic)
            if logs is None and self.auto_create:
                self.create_topic(topic, self.default_partitions)
                logs = self.topics[topic]
            return logs

    def log(self, topic: str, partition: int) -> PartitionLog | None:
        logs = self.partitions(topic)
        return logs[partition] if logs is not None and 0 <= partition < len(logs) else None

    def records(self, topic: str, partition: int | None = None) -> list[StoredRecord]:
        """What a topic (or one partition) holds now, for a test's assertions."""
        with self.lock:
            logs = self.topics.get(topic, [])
            chosen = logs if partition is None else [logs[partition]]
            return [r for log in chosen for r in log.records]

    def compact(self, topic: str) -> None:
        """Compact every partition of ``topic`` now (the log cleaner's pass)."""
        with self.lock:
            for log in self.topics[topic]:
                log.compact()

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
               headers: Headers | None, timestamp_ms: int = 0) -> int:  # fmt: skip
        with self.lock:
            log = self.log(topic, partition)
            if log is None:
                raise KeyError(f"{topic}[{partition}] does not exist")
            offset = log.append(key, value, headers, timestamp_ms or self.now_ms())
            self.changed.notify_all()
            return offset

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- faults ------------------------------------------------------------------

    def fail_produces(self, topic: str, code: int, count: int = 1, *, raised: bool = False) -> None:
        """Make the next ``count`` produces to ``topic`` fail with the KafkaError ``code``."""
        with self.lock:
            self.faults[topic] = Fault(code=code, count=count, raised=raised)

    def take_fault(self, topic: str) -> Fault | None:
        with self.lock:
            fault = self.faults.get(topic)
            if fault is None:
                return None
            fault.count -= 1
            if fault.count <= 0:
                del self.faults[topic]
            return fault

    # -- groups ------------------------------------------------------------------

    def group(self, group_id: str) -> Group:
        with self.lock:
            return self.groups.setdefault(group_id, Group())

    def member_id(self, client_id: str) -> str:
        with self.lock:
            self._members += 1
            return f"{client_id}-{self._members:06d}"

    def join(self, group_id: str, member: MemoryConsumer) -> None:
        with self.lock:
            group = self.group(group_id)
            if member not in group.members:
                group.members.append(member)
            self.rebalance(group_id)

    def leave(self, group_id: str, member: MemoryConsumer) -> None:
        with self.lock:
            group = self.group(group_id)
            if member in group.members:
                group.members.remove(member)
                group.assignment.pop(member.member_id, None)
                self.rebalance(group_id)

    def rebalance(self, group_id: str) -> None:
        """A range assignment, topic by topic, over the members in join order."""
        with self.lock:
            group = self.group(group_id)
            group.generation += 1
            assignment: dict[str, list[tuple[str, int]]] = {m.member_id: [] for m in group.members}
            topics = sorted({t for m in group.members for t in m.subscription})
            for topic in topics:
                logs = self.topics.get(topic)
                if logs is None:
                    continue
                takers = [m.member_id for m in group.members if topic in m.subscription]
                share, extra = divmod(len(logs), len(takers))
                start = 0
                for i, member_id in enumerate(takers):
                    count = share + (1 if i < extra else 0)
                    assignment[member_id] += [(topic, p) for p in range(start, start + count)]
                    start += count
            group.assignment = assignment
            self.changed.notify_all()

    def commit(self, group_id: str, offsets: dict[tuple[str, int], tuple[int, str | None]]) -> None:
        with self.lock:
            self.group(group_id).commits.update(offsets)

    def committed(self, group_id: str, topic: str, partition: int) -> tuple[int, str | None] | None:
        """The group's commit of a partition (offset and metadata), None if none."""
        with self.lock:
            return self.group(group_id).commits.get((topic, partition))

    # -- the client factory (jobcore.client_hook.ClientFactory) --------------------

    def producer(self, config: dict[str, Any]) -> MemoryProducer:
        from memkafka.producer import MemoryProducer

        return MemoryProducer(self, config)

    def consumer(self, config: dict[str, Any]) -> MemoryConsumer:
        from memkafka.consumer import MemoryConsumer

        return MemoryConsumer(self, config)

    def share_consumer(self, config: dict[str, Any]) -> Any:
        raise NotImplementedError("memkafka has no share consumer (KIP-932): use a real broker")

    def admin(self, config: dict[str, Any]) -> MemoryAdmin:
        from memkafka.admin import MemoryAdmin

        return MemoryAdmin(self, config)


def unknown(topic: str) -> KafkaError:
    return KafkaError(
        KafkaError.UNKNOWN_TOPIC_OR_PART, f"Broker: Unknown topic or partition {topic}"
    )


@contextmanager
def installed(cluster: Cluster) -> Iterator[Cluster]:
    """Every client ``jobcore.kafka`` builds inside the block is one of ``cluster``'s."""
    previous = install_clients(cluster)
    try:
        yield cluster
    finally:
        install_clients(previous)
