"""The settings the queue's guarantees rest on (idempotence and ``acks=all`` for
producers, offsets committed only by hand for consumers) are written once, here, and
each client goes through ``jobcore.client_hook``, the one place a test swaps in an
in-memory cluster. Checking that brokers answer sits beside them: it must fail at
once on a setup error the clients report."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient

from jobcore.client_hook import build_client
from jobcore.client_log import client_logger
from jobcore.kafka.errors import (
    ErrorKind,
    ErrorWatch,
    KafkaSetupError,
    classify,
    describe_setup_error,
)


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


def make_admin(settings: KafkaSettings) -> AdminClient:
    return build_client("admin", AdminClient, settings.base())


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
