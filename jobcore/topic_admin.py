"""Create a queue's topics: ``jobs.Q`` for ready jobs (and one per priority class),
``jobs.Q.overflow`` for a flooding tenant's excess, ``jobs.Q.retry.<tier>`` (and
``jobs.Q.<class>.retry.<tier>``) for jobs waiting out a delay, and ``jobs.Q.dlq``
for dead letters, ``jobs.Q.results`` for handlers' return values.

All get the same partition count so a tenant's retries and dead letters sit in the
partition matching its jobs. Creating an existing queue again is a no-op, but a queue that
exists with another partition count is an error: adding partitions later moves
tenants between partitions and breaks their ordering, so it must be a decision.

It lives in ``jobcore`` because both the producer (``producer create-queue``) and the
leasekeeper (at start) create topics, and the leasekeeper must not import the producer.
"""

from __future__ import annotations

import time
from datetime import timedelta

from jobcore.delay_tiers import MAX_DELAY, DelayTiers
from jobcore.kafka import KafkaSettings, TopicSpec, create_topics, make_admin, set_topic_config
from jobcore.priority import PriorityClasses
from jobcore.results import RESULTS_PARTITIONS
from jobcore.topics import DEFAULT_PREFIX, QueueTopics, leasekeepers_topic, outbox_relays_topic

__all__ = [
    "CONTROL_RETENTION_MS",
    "DLQ_RETENTION_MS",
    "STATUS_RETENTION_HELP",
    "STATUS_RETENTION_MS",
    "ensure_leasekeepers_topic",
    "ensure_outbox_relays_topic",
    "ensure_queue_topics",
    "retention_ms",
]

# Dead letters wait for a human; a month covers holidays and slow incident reviews.
DLQ_RETENTION_MS = 30 * 24 * 60 * 60 * 1000
# Cancellations and dedupe keys must outlive the longest delay they can concern.
CONTROL_RETENTION_MS = (MAX_DELAY + timedelta(days=5)) // timedelta(milliseconds=1)
# How each job ended: a week answers "did it already run?" for a cancel; compaction
# keeps one record per job meanwhile.
STATUS_RETENTION_MS = 7 * 24 * 60 * 60 * 1000
# Leasekeeper snapshots and outbox relay reports are live data: a day keeps a stopped
# one's last words for a look after an incident; compaction keeps one record per instance meanwhile.
LEASEKEEPERS_RETENTION_MS = 24 * 60 * 60 * 1000
# What ``--status-retention`` says, on every command that creates a queue's topics.
STATUS_RETENTION_HELP = (
    "how long jobs.QUEUE.status keeps how each job ended (7d, 12h); set on the topic "
    "whether new or not [default for a new topic: 7d; an existing one is left alone]"
)


def retention_ms(seconds: float | None) -> int | None:
    """A ``--status-retention`` in seconds as the topic config's milliseconds."""
    return None if seconds is None else round(seconds * 1000)


def ensure_leasekeepers_topic(
    settings: KafkaSettings, prefix: str = DEFAULT_PREFIX, replication: int = -1
) -> str:
    """Create ``jobs._leasekeepers`` if missing (one partition: a dashboard reads it whole)."""
    return _ensure_live_topic(settings, leasekeepers_topic(prefix), replication)


def ensure_outbox_relays_topic(
    settings: KafkaSettings, prefix: str = DEFAULT_PREFIX, replication: int = -1
) -> str:
    """Create ``jobs._outbox_relays`` if missing (one partition: a dashboard reads it whole)."""
    return _ensure_live_topic(settings, outbox_relays_topic(prefix), replication)


def _ensure_live_topic(settings: KafkaSettings, name: str, replication: int) -> str:
    """A compacted one-partition topic of live reports, one record per instance."""
    config = {
        "cleanup.policy": "compact,delete",
        "retention.ms": str(LEASEKEEPERS_RETENTION_MS),
        "segment.ms": str(60 * 60 * 1000),
    }
    create_topics(
        settings, [TopicSpec(name=name, partitions=1, replication=replication, config=config)]
    )
    return name


def ensure_queue_topics(
    settings: KafkaSettings,
    queue: str,
    *,
    partitions: int,
    prefix: str = DEFAULT_PREFIX,
    replication: int = -1,
    tiers: DelayTiers | None = None,
    classes: PriorityClasses | None = None,
    status_retention_ms: int | None = None,
) -> list[str]:
    """Create the ready and delay-tier topics of each priority class and the
    dead-letter topic of ``queue`` if missing; returns their names.

    ``replication=-1`` takes the broker's default replication factor.
    ``status_retention_ms``: how long ``jobs.Q.status`` keeps how each job ended, set
    on a new topic and on an existing one alike; None creates it with the default
    (``STATUS_RETENTION_MS``, a week) and leaves an existing topic's setting alone, so
    a restart without the option never undoes an operator's choice.
    """
    if status_retention_ms is not None and status_retention_ms < 1:
        raise ValueError(f"status retention must be > 0, got {status_retention_ms} ms")
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    topics = QueueTopics(queue=queue, prefix=prefix)
    names = (classes or PriorityClasses()).names
    specs = [
        *(
            TopicSpec(name=name, partitions=partitions, replication=replication)
            for name in topics.classes(names)
        ),
        # A flooding tenant's excess (keyed by tenant, partition p for a job of p).
        TopicSpec(name=topics.overflow, partitions=partitions, replication=replication),
        TopicSpec(
            name=topics.dlq,
            partitions=partitions,
            replication=replication,
            config={"retention.ms": str(DLQ_RETENTION_MS)},
        ),
        *(
            TopicSpec(name=name, partitions=partitions, replication=replication)
            for name in (tiers or DelayTiers()).topics(topics, names)
        ),
    ]
    # Small compacted topics every leasekeeper reads whole: one partition each.
    compacted = {"cleanup.policy": "compact,delete", "retention.ms": str(CONTROL_RETENTION_MS)}
    internal = [
        TopicSpec(name=topics.control, partitions=1, replication=replication, config=compacted),
        TopicSpec(name=topics.dedupe, partitions=1, replication=replication, config=compacted),
        # One record per job type, kept until replaced: an open breaker outlives restarts.
        TopicSpec(
            name=topics.breakers,
            partitions=1,
            replication=replication,
            config={"cleanup.policy": "compact"},
        ),
        # One record per ordered job out of its line (held, retrying, dead and
        # blocking), deleted by a tombstone when it goes back: see docs/ordering.md.
        TopicSpec(
            name=topics.ordering,
            partitions=1,
            replication=replication,
            config={"cleanup.policy": "compact"},
        ),
        # One partition: ``producer cancel`` finds a job's status without knowing the
        # partitioner the leasekeeper's producer used.
        TopicSpec(
            name=topics.status,
            partitions=1,
            replication=replication,
            config={
                "cleanup.policy": "compact,delete",
                "retention.ms": str(status_retention_ms or STATUS_RETENTION_MS),
            },
        ),
    ]
    # Handlers' return values, kept as long as how each job ended (not compacted: a job
    # run twice may leave two, and a reader takes the first). Its partition count is the
    # hash's (``jobcore.results``), whatever the queue's.
    results = TopicSpec(
        name=topics.results,
        partitions=RESULTS_PARTITIONS,
        replication=replication,
        config={"retention.ms": str(status_retention_ms or STATUS_RETENTION_MS)},
    )
    create_topics(settings, [*internal, results])
    if status_retention_ms is not None:  # the topics may have existed before
        for name in (topics.status, topics.results):
            set_topic_config(settings, name, {"retention.ms": str(status_retention_ms)})
    create_topics(settings, specs)
    _check_partitions(settings, [*specs, results])
    return [spec.name for spec in specs]


def _check_partitions(settings: KafkaSettings, specs: list[TopicSpec]) -> None:
    admin = make_admin(settings)
    # Another broker may not know a topic created a moment ago: wait until all do.
    deadline = time.monotonic() + 30
    metadata = admin.list_topics(timeout=30)
    while time.monotonic() < deadline and not all(
        spec.name in metadata.topics and metadata.topics[spec.name].partitions for spec in specs
    ):
        time.sleep(0.1)
        metadata = admin.list_topics(timeout=30)
    for spec in specs:
        if spec.name not in metadata.topics:
            raise RuntimeError(f"topic {spec.name} was created but is not visible after 30s")
        actual = len(metadata.topics[spec.name].partitions)
        if actual != spec.partitions:
            raise ValueError(
                f"topic {spec.name} already exists with {actual} partitions, not "
                f"{spec.partitions}; change a queue's partition count deliberately "
                "(kafka-topics --alter), it moves tenants between partitions"
            )
