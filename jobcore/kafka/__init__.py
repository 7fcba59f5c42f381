"""The one package that imports ``confluent_kafka``.

Every other package builds producers, consumers and admin clients through it, so
the client settings the invariants depend on (idempotence, ``acks=all``, manual
offset commits) are written once, and errors are classified in one place. Callers
import from ``jobcore.kafka`` only: the modules behind it (``errors``, ``clients``,
``admin``, ``offsets``, ``produce``) may move code between them freely. Tests put
in-memory clients in place through ``jobcore.client_hook``, never by patching
names here: a name rebound on this package would not reach the module that uses it.
"""

from __future__ import annotations

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    ShareConsumer,
    TopicPartition,
)

from jobcore.kafka.admin import (
    TopicSpec,
    await_result,
    cluster_id,
    create_topics,
    delete_records,
    set_group_config,
    set_topic_config,
    topic_config,
    topic_ids,
)
from jobcore.kafka.clients import (
    KafkaSettings,
    make_admin,
    make_consumer,
    make_producer,
    make_share_consumer,
    reachable,
    wait_for_brokers,
)
from jobcore.kafka.errors import (
    ErrorKind,
    ErrorWatch,
    KafkaSetupError,
    classify,
    classify_error,
    describe_setup_error,
    through_transient,
)
from jobcore.kafka.offsets import (
    committed_offsets,
    end_offsets,
    group_offsets,
    read_to_end,
    watermarks,
)
from jobcore.kafka.produce import (
    DeliveryCallback,
    ProduceError,
    ProduceFailure,
    classify_produce_error,
    is_retriable,
    produce_once,
    produce_reliably,
)

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
    "through_transient",
    "topic_config",
    "topic_ids",
    "wait_for_brokers",
    "watermarks",
]
