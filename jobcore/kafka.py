"""The one module that imports ``confluent_kafka``.

Every other package builds producers, consumers and admin clients here, so the
client settings the invariants depend on (idempotence, ``acks=all``, manual
offset commits) are written once, and errors are classified in one place.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    ShareConsumer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from jobcore.client_hook import build_client
from jobcore.client_log import client_logger

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "Consumer",
    "DeliveryCallback",
    "ErrorKind",
    "ErrorWatch",
    "KafkaError",
    "KafkaException",
    "KafkaSettings",
    "KafkaSetupError",
    "Message",
    "ProduceError",
    "ProduceFailure",
    "Producer",
    "ShareConsumer",
    "TopicPartition",
    "TopicSpec",
    "await_result",
    "classify",
    "classify_error",
    "classify_produce_error",
    "cluster_id",
    "committed_offsets",
    "create_topics",
    "delete_records",
    "describe_setup_error",
    "end_offsets",
    "group_offsets",
    "is_retriable",
    "make_admin",
    "make_consumer",
    "make_producer",
    "make_share_consumer",
    "produce_once",
    "produce_reliably",
    "reachable",
    "read_to_end",
    "set_group_config",
    "set_topic_config",
    "topic_config",
    "topic_ids",
    "wait_for_brokers",
    "watermarks",
]

log = logging.getLogger(__name__)


DeliveryCallback = Callable[[KafkaError | None, Message], None]


class ErrorKind(StrEnum):
    """What to do about a Kafka error."""

    TRANSIENT = "transient"  # brokers unreachable or busy: retry with backoff
    SETUP = "setup"  # credentials, configuration, authorization: a person must fix it
    OTHER = "other"  # anything else: a bug or an unexpected state; fail loudly


# Codes only a person can fix; retrying them would hang a command forever.
_SETUP_CODES = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.UNSUPPORTED_SASL_MECHANISM,
        KafkaError.ILLEGAL_SASL_STATE,
        KafkaError._INVALID_ARG,
        KafkaError._UNKNOWN_PROTOCOL,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)
# Codes that mean "the cluster is not there right now": brokers down or restarting,
# a coordinator moving, a request that timed out.
_TRANSIENT_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._DESTROY_BROKER,
        KafkaError._TIMED_OUT,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._RESOLVE,
        KafkaError._WAIT_COORD,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.BROKER_NOT_AVAILABLE,
    }
)


class KafkaSetupError(Exception):
    """A mistake in the Kafka setup (credentials, config, a missing queue) that no
    retry can fix; the message says what is wrong and how to fix it."""


def classify_error(error: KafkaError) -> ErrorKind:
    """Setup errors first: an authentication failure can also say "retriable"."""
    if error.code() in _SETUP_CODES:
        return ErrorKind.SETUP
    if error.fatal():
        return ErrorKind.OTHER
    if error.code() in _TRANSIENT_CODES or error.retriable():
        return ErrorKind.TRANSIENT
    return ErrorKind.OTHER


def classify(exc: BaseException) -> ErrorKind:
    """Classify an exception raised by a client call, looking through wrappers."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KafkaSetupError):
            return ErrorKind.SETUP
        if isinstance(seen, KafkaException) and isinstance(seen.args[0], KafkaError):
            return classify_error(seen.args[0])
        if isinstance(seen, TimeoutError):
            return ErrorKind.TRANSIENT
        seen = seen.__cause__
    return ErrorKind.OTHER


def describe_setup_error(error: KafkaError) -> str:
    """One line naming the problem and the fix, for people."""
    text = error.str()
    if error.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
        return (
            f"Kafka rejected the credentials ({text}); check sasl.mechanism, sasl.username "
            "and sasl.password in the Kafka config file (--kafka-config or KAFKA_CONFIG)"
        )
    if "AUTHORIZATION" in error.name():
        return f"Kafka refused access ({text}); grant this principal the ACLs it needs"
    return f"Kafka client setup failed ({text}); check the Kafka config file settings"


class ErrorWatch:
    """Collects what librdkafka reports only through ``error_cb``.

    A wrong password never surfaces as an exception: librdkafka reports it to
    ``error_cb`` and keeps reconnecting, so calls just time out. Every client built
    from one ``KafkaSettings`` reports here, and code that waits asks
    :meth:`raise_if_setup_error` to fail fast with the real reason instead.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._setup: KafkaError | None = None
        self._last: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        kind = classify_error(error)
        with self._lock:
            self._last = error
            if kind is ErrorKind.SETUP and self._setup is None:
                self._setup = error
        # Transport errors repeat while brokers are down; callers that wait log one
        # line per backoff step with the last reason instead.
        # "All brokers down" comes once per outage and is worth a line of its own.
        quiet = kind is ErrorKind.TRANSIENT and error.code() != KafkaError._ALL_BROKERS_DOWN
        level = logging.DEBUG if quiet else logging.WARNING
        log.log(level, "Kafka client error: %s", error.str())

    def last_reason(self) -> str | None:
        with self._lock:
            return None if self._last is None else self._last.str()

    def setup_error(self) -> KafkaError | None:
        with self._lock:
            return self._setup

    def raise_if_setup_error(self) -> None:
        error = self.setup_error()
        if error is not None:
            raise KafkaSetupError(describe_setup_error(error))


@dataclass(frozen=True, kw_only=True)
class KafkaSettings:
    """How to reach the cluster; ``extra`` passes librdkafka options through (e.g. the
    SASL/TLS properties of a ``--kafka-config`` file); every client built from these
    settings reports its errors to ``watch``."""

    bootstrap: str
    client_id: str = "kafka-lease-queue"
    extra: Mapping[str, str | int | bool] = field(default_factory=dict)
    # Where ``bootstrap`` came from (a flag, an environment variable, a default), so
    # "cannot reach Kafka" can name the setting to change; empty when unknown.
    origin: str = ""
    watch: ErrorWatch = field(default_factory=ErrorWatch, compare=False, repr=False)

    def base(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "client.id": self.client_id,
            "logger": client_logger(),
            **self.extra,
            "error_cb": self.watch,
        }


@dataclass(frozen=True, kw_only=True)
class TopicSpec:
    name: str
    partitions: int
    replication: int = -1
    config: Mapping[str, str] = field(default_factory=dict)


def make_producer(settings: KafkaSettings, **overrides: Any) -> Producer:
    """An idempotent, ``acks=all`` producer: a returned enqueue is a durable job."""
    config = {
        **settings.base(),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
        **overrides,
    }
    return build_client("producer", Producer, config)


def make_consumer(settings: KafkaSettings, group_id: str, **overrides: Any) -> Consumer:
    """A consumer that never commits on its own: offsets move only past resolved jobs."""
    config = {
        **settings.base(),
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 50,
        "isolation.level": "read_committed",
        **overrides,
    }
    return build_client("consumer", Consumer, config)


def make_share_consumer(settings: KafkaSettings, group_id: str, **overrides: Any) -> ShareConsumer:
    """A KIP-932 share-group member that acknowledges each record itself (benchmarks)."""
    config = {
        **settings.base(),
        "group.id": group_id,
        "share.acknowledgement.mode": "explicit",
        **overrides,
    }
    return build_client("share_consumer", ShareConsumer, config)


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


def make_admin(settings: KafkaSettings) -> AdminClient:
    return build_client("admin", AdminClient, settings.base())


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


def reachable(settings: KafkaSettings, timeout: float) -> bool:
    """True once a broker answers a metadata request, False after ``timeout`` s of
    silence. A credential or configuration problem the client reports meanwhile
    raises KafkaSetupError at once: it is not "unreachable", and waiting would not help.
    """
    admin = make_admin(settings)
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        try:
            admin.list_topics(timeout=max(0.1, min(1.0, remaining)))
            return True
        except KafkaException as exc:
            if classify(exc) is ErrorKind.SETUP:
                raise KafkaSetupError(describe_setup_error(exc.args[0])) from exc
        admin.poll(0)
        settings.watch.raise_if_setup_error()
        if time.monotonic() >= deadline:
            return False


def wait_for_brokers(bootstrap: str, count: int, timeout: float) -> bool:
    """True once ``count`` brokers answer a metadata request within ``timeout`` s."""
    # log_level 0: a starting broker refuses connections; the probe notes it quietly.
    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "log_level": 0, "socket.connection.setup.timeout.ms": 1000}
    )
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return len(metadata.brokers) >= count


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


def end_offsets(
    consumer: Consumer, topic: str, partitions: Iterable[int], timeout: float = 30.0
) -> dict[int, int]:
    """High watermark of each partition (the offset the next record will get). A
    leader that is still being elected (a new topic, a broker restart) is waited for."""
    result = {}
    deadline = time.monotonic() + timeout
    for p in partitions:
        while True:
            try:
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                break
            except KafkaException as exc:
                if classify(exc) is not ErrorKind.TRANSIENT or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        result[p] = high
    return result


def watermarks(
    admin: AdminClient, partitions: Iterable[tuple[str, int]], timeout: float = 10.0
) -> dict[tuple[str, int], tuple[int, int]]:
    """Low and high watermark of many partitions in two batched requests (a dashboard
    over hundreds of queues cannot ask partition by partition). A partition whose
    answer failed is left out."""
    wanted = list(partitions)
    found: dict[tuple[str, int], list[int]] = {tp: [-1, -1] for tp in wanted}
    specs = (OffsetSpec.earliest(), OffsetSpec.latest())  # type: ignore[no-untyped-call]
    for index, spec in enumerate(specs):
        if not found:
            break
        request = {TopicPartition(t, p): spec for t, p in found}  # not those that failed
        for tp, future in admin.list_offsets(request, request_timeout=timeout).items():
            try:
                found[(tp.topic, tp.partition)][index] = future.result(timeout=timeout).offset
            except KafkaException:
                found.pop((tp.topic, tp.partition), None)
    return {tp: (low, high) for tp, (low, high) in found.items() if high >= 0}


def group_offsets(
    admin: AdminClient, groups: Iterable[str], timeout: float = 10.0
) -> dict[str, dict[tuple[str, int], int]]:
    """Each group's committed offsets, all groups at once ({} when none or failed). The
    dashboard avoids it: librdkafka 2.16 may crash here on a new broker (kafka_view)."""
    futures = {
        group: admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=timeout
        )[group]
        for group in groups
    }
    result: dict[str, dict[tuple[str, int], int]] = {}
    for group, future in futures.items():
        try:
            answer = future.result(timeout=timeout)
        except KafkaException:
            result[group] = {}
            continue
        result[group] = {
            (tp.topic, tp.partition): tp.offset
            for tp in answer.topic_partitions or []
            if tp.offset >= 0
        }
    return result


def committed_offsets(
    consumer: Consumer, topic: str, partitions: Iterable[int], timeout: float = 10.0
) -> dict[int, int]:
    """The group's committed offset per partition (-1001 when none)."""
    tps = [TopicPartition(topic, p) for p in partitions]
    return {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=timeout)}


def read_to_end(
    consumer: Consumer, tp: TopicPartition, apply: Callable[[Message], None], timeout_s: float
) -> None:
    """Feed ``apply`` every record of the assigned ``tp`` up to the end it has now:
    how a compacted state topic is caught up before its state is trusted.
    TimeoutError if that takes longer than ``timeout_s``."""
    low, high = consumer.get_watermark_offsets(tp, timeout=10)
    deadline = time.monotonic() + timeout_s
    while high > low:
        position = consumer.position([tp])[0].offset
        if position >= high:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{tp.topic} not read within {timeout_s}s")
        for message in consumer.consume(500, timeout=0.2):
            apply(message)


def is_retriable(error: KafkaError) -> bool:
    """Transient errors are retried; fatal ones (authorization, _FATAL) are raised."""
    if error.fatal():
        return False
    return bool(error.retriable()) or error.code() in (
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._MSG_TIMED_OUT,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    )


class ProduceFailure(StrEnum):
    """What a failed produce means for the record: the one vocabulary of send policies."""

    TRANSIENT = "transient"  # send it again after a backoff
    TOO_LARGE = "too large"  # the same bytes will never fit: send something smaller
    BLOCKED = "blocked"  # unauthorised, unknown topic, fatal: needs an operator


_TOO_LARGE = frozenset(
    code
    for code in (
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        # Older clients name the local check separately.
        getattr(KafkaError, "_MSG_SIZE_TOO_LARGE", None),
    )
    if code is not None
)
_BLOCKED = frozenset(
    (
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
    )
)


def classify_produce_error(error: KafkaError) -> ProduceFailure:
    """Sort a produce error (raised by ``produce()`` or in a delivery report) into what
    to do next. Anything neither too large nor transient counts as blocked: holding a
    record and alerting is safe, dropping or resolving it would lose a job."""
    code = error.code()
    if code in _TOO_LARGE:
        return ProduceFailure.TOO_LARGE
    if code in _BLOCKED or error.fatal():
        return ProduceFailure.BLOCKED
    if code == KafkaError._QUEUE_FULL or is_retriable(error):
        return ProduceFailure.TRANSIENT
    return ProduceFailure.BLOCKED


class ProduceError(Exception):
    """``produce()`` refused a record before sending it (too large for the producer,
    unknown topic, local queue full), classified."""

    def __init__(self, failure: ProduceFailure, text: str) -> None:
        super().__init__(text)
        self.failure = failure


ProduceCallback = Callable[[ProduceFailure | None, str], None]  # None: the record is durable


def produce_once(
    producer: Producer,
    topic: str,
    *,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]] | None = None,
    on_delivery: ProduceCallback,
    partition: int | None = None,
    on_offset: Callable[[int], None] | None = None,
) -> None:
    """Produce one record without waiting or retrying: ``on_delivery(None, "")`` on
    success, ``on_delivery(failure, text)`` on a failed delivery report, and
    ``ProduceError`` when ``produce()`` refuses it at once. The caller owns the policy.
    ``partition`` pins the record's partition; ``on_offset`` hears where a delivered
    record landed, before ``on_delivery``."""

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            if on_offset is not None:
                offset = msg.offset()
                on_offset(-1 if offset is None else offset)
            on_delivery(None, "")
        else:
            on_delivery(classify_produce_error(err), f"{err.name()}: {err.str()}")

    kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivered}
    if headers:
        kwargs["headers"] = headers
    if partition is not None:
        kwargs["partition"] = partition
    try:
        producer.produce(topic, **kwargs)
    except BufferError as exc:
        raise ProduceError(ProduceFailure.TRANSIENT, f"local producer queue full: {exc}") from exc
    except KafkaException as exc:
        err = exc.args[0]
        if not isinstance(err, KafkaError):
            raise
        raise ProduceError(classify_produce_error(err), f"{err.name()}: {err.str()}") from exc


def produce_reliably(
    producer: Producer,
    topic: str,
    *,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]] | None = None,
    partition: int | None = None,
    on_delivery: DeliveryCallback | None = None,
) -> None:
    """Produce one record (``value`` None: a tombstone), serving delivery reports while
    the local queue is full."""
    kwargs: dict[str, Any] = {"key": key, "value": value}
    if headers:
        kwargs["headers"] = headers
    if partition is not None:
        kwargs["partition"] = partition
    if on_delivery is not None:
        kwargs["on_delivery"] = on_delivery
    while True:
        try:
            producer.produce(topic, **kwargs)
            producer.poll(0)
            return
        except BufferError:
            producer.poll(0.05)
