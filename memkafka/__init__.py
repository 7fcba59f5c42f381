"""An in-memory Kafka for tests: topics of partitioned logs with offsets, consumer
groups with rebalance callbacks, commits with metadata, delivery reports, and the
admin calls the project makes.

The runtime never imports it. A test installs a cluster behind the client
factories of ``jobcore.kafka`` (``make_producer``, ``make_consumer``,
``make_admin``) and runs the project's real code over it::

    cluster = Cluster()
    with installed(cluster):
        ensure_queue_topics(settings, "q", partitions=2)
        ...
"""

from memkafka.admin import MemoryAdmin
from memkafka.cluster import Cluster, Fault, installed
from memkafka.consumer import MemoryConsumer
from memkafka.producer import MemoryProducer
from memkafka.records import MemoryMessage, StoredRecord, partition_of

__all__ = [
    "Cluster",
    "Fault",
    "MemoryAdmin",
    "MemoryConsumer",
    "MemoryMessage",
    "MemoryProducer",
    "StoredRecord",
    "installed",
    "partition_of",
]
