"""The admin calls the project makes through ``jobcore.kafka``, over the in-memory
cluster, answered with futures as the real ``AdminClient`` answers them. Any other
call raises NotImplementedError naming it."""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from jobcore.kafka import KafkaError, KafkaException, TopicPartition
from memkafka.cluster import Cluster, unknown
from memkafka.records import topic_partition

__all__ = ["MemoryAdmin", "metadata"]

BROKER_ID = 1


@dataclass
class PartitionInfo:
    id: int
    leader: int = BROKER_ID
    replicas: list[int] = field(default_factory=lambda: [BROKER_ID])
    isrs: list[int] = field(default_factory=lambda: [BROKER_ID])
    error: KafkaError | None = None


@dataclass
class TopicInfo:
    topic: str
    partitions: dict[int, PartitionInfo]
    error: KafkaError | None = None


@dataclass
class ClusterInfo:
    """What ``list_topics`` answers: ``.topics[name].partitions``, ``.brokers``."""

    cluster_id: str
    topics: dict[str, TopicInfo]
    brokers: dict[int, str] = field(default_factory=lambda: {BROKER_ID: "memory:9092"})
    controller_id: int = BROKER_ID


@dataclass
class Answer:
    """A result object with the attributes the project reads (offset, cluster_id...)."""

    offset: int = -1
    cluster_id: str = ""
    topic_id: str = ""
    group_id: str = ""
    topic_partitions: list[TopicPartition] | None = None


@dataclass
class ConfigValue:
    name: str
    value: str | None


def metadata(cluster: Cluster, topic: str | None = None) -> ClusterInfo:
    with cluster.lock:
        names = sorted(cluster.topics) if topic is None else [topic]
        topics = {}
        for name in names:
            logs = cluster.partitions(name)
            if logs is None:
                topics[name] = TopicInfo(name, {}, unknown(name))
            else:
                topics[name] = TopicInfo(name, {p: PartitionInfo(p) for p in range(len(logs))})
        return ClusterInfo(cluster.cluster_id, topics)


def _done(value: Any = None, error: KafkaError | None = None) -> Future[Any]:
    future: Future[Any] = Future()
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(KafkaException(error))
    return future


class MemoryAdmin:
    def __init__(self, cluster: Cluster, config: dict[str, Any]) -> None:
        self._cluster = cluster
        self._config = config

    def poll(self, timeout: float = 0) -> int:
        return 0

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterInfo:
        return metadata(self._cluster, topic)

    def create_topics(self, new_topics: Iterable[Any], **_: Any) -> dict[str, Future[Any]]:
        futures = {}
        for new in new_topics:
            partitions = new.num_partitions if new.num_partitions > 0 else 1
            created = self._cluster.create_topic(new.topic, partitions, dict(new.config or {}))
            exists = KafkaError(
                KafkaError.TOPIC_ALREADY_EXISTS, f"Topic '{new.topic}' already exists."
            )
            futures[new.topic] = _done(None, None if created else exists)
        return futures

    def delete_topics(self, topics: Iterable[str], **_: Any) -> dict[str, Future[Any]]:
        return {
            t: _done(None, None if self._cluster.delete_topic(t) else unknown(t)) for t in topics
        }

    def describe_configs(self, resources: Iterable[Any], **_: Any) -> dict[Any, Future[Any]]:
        futures = {}
        for resource in resources:
            configs = self._cluster.topic_configs.get(resource.name)
            found = {k: ConfigValue(k, v) for k, v in (configs or {}).items()}
            futures[resource] = _done(
                found, None if configs is not None else unknown(resource.name)
            )
        return futures

    def incremental_alter_configs(
        self, resources: Iterable[Any], **_: Any
    ) -> dict[Any, Future[Any]]:
        """Topic configs are kept (and read back by ``describe_configs``); group configs
        are accepted and ignored."""
        futures = {}
        for resource in resources:
            with self._cluster.lock:
                configs = self._cluster.topic_configs.get(resource.name)
                for entry in resource.incremental_configs or []:
                    if configs is not None:
                        configs[entry.name] = entry.value
            futures[resource] = _done()
        return futures

    def list_offsets(self, requests: dict[TopicPartition, Any], **_: Any) -> dict[Any, Future[Any]]:
        """``OffsetSpec.earliest()`` (-2) or ``latest()`` (-1) of each partition."""
        futures = {}
        for tp, spec in requests.items():
            log = self._cluster.log(tp.topic, tp.partition)
            if log is None:
                futures[tp] = _done(error=unknown(tp.topic))
            else:
                earliest = getattr(spec, "_value", -1) == -2
                futures[tp] = _done(Answer(offset=log.low if earliest else log.high))
        return futures

    def list_consumer_group_offsets(self, requests: list[Any], **_: Any) -> dict[str, Future[Any]]:
        futures = {}
        for request in requests:
            with self._cluster.lock:
                commits = self._cluster.group(request.group_id).commits
                parts = [topic_partition(t, p, o, m) for (t, p), (o, m) in sorted(commits.items())]
            futures[request.group_id] = _done(
                Answer(group_id=request.group_id, topic_partitions=parts)
            )
        return futures

    def delete_records(
        self, partitions: Iterable[TopicPartition], **_: Any
    ) -> dict[Any, Future[Any]]:
        """Move each log start to the offset given (OFFSET_END: the high watermark)."""
        futures = {}
        for tp in partitions:
            with self._cluster.lock:
                log = self._cluster.log(tp.topic, tp.partition)
                if log is None:
                    futures[tp] = _done(error=unknown(tp.topic))
                    continue
                log.delete_before(log.high if tp.offset < 0 else tp.offset)
                futures[tp] = _done(Answer(offset=log.low))
        return futures

    def describe_cluster(self, **_: Any) -> Future[Any]:
        return _done(Answer(cluster_id=self._cluster.cluster_id))

    def describe_topics(self, topics: Any, **_: Any) -> dict[str, Future[Any]]:
        names = list(getattr(topics, "topic_names", topics))
        return {
            name: _done(Answer(topic_id=f"{self._cluster.cluster_id}-{name}"))
            if name in self._cluster.topics
            else _done(error=unknown(name))
            for name in names
        }

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise NotImplementedError(f"memkafka's admin client has no {name}(); add it to memkafka")
