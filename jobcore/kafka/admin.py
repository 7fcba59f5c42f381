"""Set-up must be repeatable (a topic that already exists counts as created) and must
fail fast (a wrong password reaches only ``error_cb``, so each wait serves the client
in short steps and stops at a setup error instead of timing out); the admin calls
are wrapped here so every command gets both. Each admin client is kept alive until
the futures it resolves are done."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_END,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from jobcore.kafka.clients import KafkaSettings, make_admin


@dataclass(frozen=True, kw_only=True)
class TopicSpec:
    name: str
    partitions: int
    replication: int = -1
    config: Mapping[str, str] = field(default_factory=dict)


def set_group_config(
    settings: KafkaSettings, group_id: str, configs: Mapping[str, str], timeout: float = 30.0
) -> None:
    """Set group-level configs, e.g. ``share.auto.offset.reset`` of a share group."""
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
    ]
    resource = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=entries)
    admin = make_admin(settings)  # must outlive the futures it resolves
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=timeout)


def set_topic_config(
    settings: KafkaSettings, topic: str, configs: Mapping[str, str], timeout: float = 30.0
) -> None:
    """Set topic-level configs (e.g. ``retention.ms``), leaving the others as they are."""
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
    ]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    admin = make_admin(settings)  # must outlive the futures it resolves
    for future in admin.incremental_alter_configs([resource]).values():
        await_result(future, admin, settings, timeout)


def topic_config(settings: KafkaSettings, topic: str, timeout: float = 30.0) -> dict[str, str]:
    """A topic's effective configs as the broker reports them, by name."""
    admin = make_admin(settings)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    (future,) = admin.describe_configs([resource], request_timeout=timeout).values()
    entries = await_result(future, admin, settings, timeout)
    return {name: str(entry.value) for name, entry in entries.items()}


def cluster_id(settings: KafkaSettings, timeout: float = 30.0) -> str:
    """The cluster's id (KRaft or ZooKeeper), which a new cluster never reuses."""
    admin = make_admin(settings)  # must outlive the future it resolves
    future = admin.describe_cluster(request_timeout=timeout)
    found = future.result(timeout=timeout).cluster_id
    if not found:
        raise RuntimeError(f"the cluster at {settings.bootstrap} did not report its id")
    return str(found)


def topic_ids(
    settings: KafkaSettings, names: Iterable[str], timeout: float = 30.0
) -> dict[str, str]:
    """Each topic's id (a UUID): a topic deleted and created again gets a new one."""
    admin = make_admin(settings)
    wanted = sorted(set(names))
    futures = admin.describe_topics(TopicCollection(wanted), request_timeout=timeout)
    return {name: str(futures[name].result(timeout=timeout).topic_id) for name in wanted}


def create_topics(
    settings: KafkaSettings, specs: Iterable[TopicSpec], timeout: float = 30.0
) -> None:
    """Create topics, treating "already exists" as success so set-up is repeatable."""
    admin = make_admin(settings)
    new = [
        NewTopic(
            s.name,
            num_partitions=s.partitions,
            replication_factor=s.replication,
            config=dict(s.config),
        )
        for s in specs
    ]
    if not new:
        return
    futures = admin.create_topics(new, operation_timeout=timeout, request_timeout=timeout)
    for name, future in futures.items():
        try:
            await_result(future, admin, settings, timeout)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise RuntimeError(f"creating topic {name} failed: {error}") from exc
    _await_topics_visible(admin, [s.name for s in specs], timeout)


def await_result(
    future: Future[Any], client: AdminClient, settings: KafkaSettings, timeout: float
) -> Any:
    """``future.result(timeout)``, failing fast on a setup error (a wrong password is
    only reported to ``error_cb``, which the client serves in ``poll``)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return future.result(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
        except TimeoutError:
            client.poll(0)
            settings.watch.raise_if_setup_error()
            if time.monotonic() >= deadline:
                raise


def _await_topics_visible(admin: AdminClient, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        topics = admin.list_topics(timeout=timeout).topics
        if all(n in topics and not topics[n].error and topics[n].partitions for n in names):
            return
        time.sleep(0.05)
    raise RuntimeError(f"topics {names} not visible within {timeout}s")


def delete_records(settings: KafkaSettings, topic: str, partitions: Iterable[int]) -> None:
    """Delete every record of ``partitions`` (the low watermark moves to the end), as
    retention does when records expire; tests use it to make that happen now."""
    admin = make_admin(settings)  # must outlive the futures it resolves
    tps = [TopicPartition(topic, p, OFFSET_END) for p in partitions]
    for future in admin.delete_records(tps, request_timeout=30).values():
        future.result(timeout=30)
