"""The control feed over the in-memory Kafka: what ``JobProducer.cancel`` writes is
read back by a leasekeeper's feed, tombstones withdraw it, and a feed started after
the log cleaner ran (records gone, offsets with holes, a deleted log start) still
catches up rather than waiting for records that will never come."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jobcore.control import Cancellation
from jobcore.kafka import KafkaSettings, delete_records, make_producer, produce_reliably
from jobcore.topic_admin import ensure_queue_topics
from jobcore.topics import QueueTopics
from leasekeeper.core.control_state import ControlState
from leasekeeper.kafka.control_feed import ControlFeed
from memkafka import Cluster, installed
from producer.api import JobProducer

SETTINGS = KafkaSettings(bootstrap="memory")
TOPICS = QueueTopics(queue="q")
DAY_MS = 24 * 3600 * 1000


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with installed(Cluster()) as memory:
        ensure_queue_topics(SETTINGS, "q", partitions=1)
        yield memory


def _feed() -> tuple[ControlFeed, ControlState]:
    state = ControlState(dedupe_window_ms=DAY_MS)
    return ControlFeed(settings=SETTINGS, topics=TOPICS, state=state), state


def test_a_cancel_reaches_the_feed_and_a_tombstone_withdraws_it(cluster: Cluster) -> None:
    with JobProducer(SETTINGS) as producer:
        producer.cancel("q", "j1")
        producer.cancel("q", "j2")
    feed, state = _feed()
    feed.catch_up(timeout_s=5)
    assert state.is_cancelled("j1") and state.is_cancelled("j2")
    assert feed.snapshot().catch_up_records == 2
    kafka = make_producer(SETTINGS)
    produce_reliably(kafka, TOPICS.control, key=Cancellation(job_id="j1", cancelled_at_ms=0).key,
                     value=None)  # fmt: skip
    feed.poll()
    assert not state.is_cancelled("j1") and state.is_cancelled("j2")


def test_a_feed_catches_up_over_a_compacted_and_a_deleted_log(cluster: Cluster) -> None:
    with JobProducer(SETTINGS) as producer:
        for job_id in ("j1", "j2", "j1"):
            producer.cancel("q", job_id)
        producer.cancel("q", "j3")
    kafka = make_producer(SETTINGS)
    produce_reliably(kafka, TOPICS.control, key=Cancellation(job_id="j3", cancelled_at_ms=0).key,
                     value=None)  # fmt: skip
    cluster.compact(TOPICS.control)  # j2 and the last j1 are left; j3 and its tombstone go
    assert [r.offset for r in cluster.records(TOPICS.control)] == [1, 2]
    produce_reliably(kafka, TOPICS.dedupe, key=b"k", value=b"expired")
    delete_records(SETTINGS, TOPICS.dedupe, [0])  # expired: low == high > 0
    feed, state = _feed()
    feed.catch_up(timeout_s=5)
    assert state.sizes() == (2, 0)
    assert not state.is_cancelled("j3")
