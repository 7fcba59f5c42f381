"""A real Apache Kafka the project runs itself: fetch the jars, start, stop, chaos."""

from devtools.dev_cluster import cache_root
from devtools.localkafka.cluster import BrokerNode, LocalKafka, SaslListener, free_port
from devtools.localkafka.distribution import (
    DEFAULT_KAFKA_VERSION,
    KafkaDistribution,
    KafkaUnavailable,
    obtain,
)

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "BrokerNode",
    "KafkaDistribution",
    "KafkaUnavailable",
    "LocalKafka",
    "SaslListener",
    "cache_root",
    "free_port",
    "obtain",
]
