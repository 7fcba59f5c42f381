"""A lane topic created after the leasekeeper started is read without a restart (N17):
the feed looks for a missing topic again, at each assignment and every ``RECHECK_S``
while polling, instead of deciding once for the process's life.

The feed runs over the in-memory Kafka (``memkafka``): the topic is created under it
when the test says, and the feed's own admin and consumer find and read it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jobcore.kafka import KafkaSettings, TopicPartition
from leasekeeper.core.leases import TopicPart
from leasekeeper.ordering.lane import RECHECK_S, LaneFeed
from leasekeeper.ordering.values import lane_key
from memkafka import Cluster, installed
from schemas.codec import EnvelopeCodec, SchemaRegistry

LANE = "jobs.q.ordering"
CLASS_PART = TopicPart("jobs.q", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with installed(Cluster()) as memory:
        yield memory


def _feed(clock: Clock) -> LaneFeed:
    return LaneFeed(settings=KafkaSettings(bootstrap="memory", client_id="t"), topic=LANE,
                    codec=EnvelopeCodec(SchemaRegistry()),
                    on_operator=lambda tp, seq, entry: None, monotonic=clock)  # fmt: skip


def _create_lane_with_a_record(cluster: Cluster) -> None:
    """The topic, with one entry of a partition not loaded here (indexed, not decoded)."""
    cluster.create_topic(LANE, 1)
    cluster.append(LANE, 0, lane_key(CLASS_PART, 7).encode(), b"entry", None)


def _assigned(feed: LaneFeed) -> list[str]:
    return [tp.topic for tp in feed._consumer.assignment()]


def test_polling_finds_a_lane_topic_created_later(cluster: Cluster) -> None:
    clock = Clock()
    feed = _feed(clock)
    feed.catch_up()
    assert feed.missing
    feed.poll()  # too soon to look again
    assert _assigned(feed) == []
    clock.now += RECHECK_S
    feed.poll()  # still missing
    assert _assigned(feed) == [] and feed.missing
    _create_lane_with_a_record(cluster)
    feed.poll()  # created meanwhile, but not looked for again yet
    assert _assigned(feed) == [] and feed.missing
    clock.now += RECHECK_S
    feed.poll()  # found: read from its beginning
    assert _assigned(feed) == [LANE] and not feed.missing
    assert feed.offsets == {CLASS_PART: {7: 0}}
    assert feed._consumer.position([TopicPartition(LANE, 0)])[0].offset == 1


def test_an_assignment_looks_for_the_lane_topic_again(cluster: Cluster) -> None:
    clock = Clock()
    feed = _feed(clock)
    feed.catch_up()
    assert feed.missing
    _create_lane_with_a_record(cluster)
    feed.catch_up()  # a partition moved here after the topic was created
    assert _assigned(feed) == [LANE] and not feed.missing
    assert feed.offsets == {CLASS_PART: {7: 0}}  # read to its end
