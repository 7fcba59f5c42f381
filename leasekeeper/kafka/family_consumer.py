"""One leasekeeper's consumers, one per topic family, looking like one to the loop.

A consumer group balances its members by the total number of partitions over
every topic they subscribe to. With one consumer per leasekeeper subscribed to
every class topic and every delay tier, cooperative-sticky may leave one
leasekeeper with delay-tier partitions only (its workers idle while the other
holds every ready partition), or with bulk partitions only. So each leasekeeper
runs one consumer per *family*: one per priority class's ready topic and one for
all the delay tiers, one for the overflow lane (any other topic is a family of
its own). They all join the
queue's one consumer group, so committed offsets and the hand-over stay as they
were; as each family's topics are subscribed to by that family's consumers only,
the assignor balances every family on its own: each leasekeeper gets its share of
each class's ready partitions and of the tiers, after a restart too.

``FamilyConsumer`` routes each call by topic to its family's consumer (pause,
resume, seek, commit) and polls them in turn (``consume``). Rebalance callbacks
are those of each real consumer. With static membership, each consumer's
``group.instance.id`` is the leasekeeper's ``--instance-id`` and its family
(``family_instance_id``), so a restart on the same id takes back every family's
partitions and two processes sharing an id still fence each other.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from jobcore.kafka import Consumer, KafkaException, Message, TopicPartition
from jobcore.topics import QueueTopics

__all__ = [
    "OVERFLOW_FAMILY",
    "TIERS_FAMILY",
    "FamilyConsumer",
    "family_instance_id",
    "topic_families",
]

TIERS_FAMILY = "tiers"
OVERFLOW_FAMILY = "overflow"
# How long one consumer is waited on before the next is asked, while none has records:
# a record that arrives at another family's consumer waits at most this times their
# number (3 ms x 3), well under the loop's poll timeout.
SLICE_S = 0.003

RebalanceCallback = Callable[[Consumer, list[TopicPartition]], None]


def topic_families(
    topics: QueueTopics, classes: Sequence[str], tier_topics: Iterable[str]
) -> Callable[[str], str]:
    """The family of each topic a leasekeeper consumes: a class's ready topic is its
    class's, every delay tier is ``tiers``, the overflow lane ``overflow``; any other
    topic is a family of its own."""
    family = {topics.of_class(name): name for name in classes}
    family.update({topic: TIERS_FAMILY for topic in tier_topics})
    family[topics.overflow] = OVERFLOW_FAMILY
    return lambda topic: family.get(topic, topic)


def family_instance_id(instance_id: str, family: str) -> str:
    """The static member id of one family's consumer: each needs its own."""
    return f"{instance_id}.{family}"


class FamilyConsumer:
    """One real consumer per topic family, made when ``subscribe`` names the topics."""

    def __init__(
        self,
        *,
        make: Callable[[str], Consumer],
        family_of: Callable[[str], str],
        clock: Callable[[], float] = time.monotonic,
        slice_s: float = SLICE_S,
        first: frozenset[str] = frozenset(),
    ) -> None:
        self._make = make
        self._first = first
        self._family_of = family_of
        self._clock = clock
        self._slice_s = slice_s
        self._consumers: dict[str, Consumer] = {}
        self._turn = itertools.count()

    @property
    def families(self) -> Mapping[str, Consumer]:
        return dict(self._consumers)

    def subscribe(
        self,
        topics: list[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        """Each family's consumer subscribes to its family's topics, with the same
        callbacks (they receive the real consumer that was assigned)."""
        grouped: dict[str, list[str]] = {}
        for topic in topics:
            grouped.setdefault(self._family_of(topic), []).append(topic)
        for family, names in grouped.items():
            consumer = self._consumers.get(family) or self._make(family)
            self._consumers[family] = consumer
            consumer.subscribe(names, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """Up to ``num_messages`` records from the families: the ``first`` families
        (the classes weighted above the default) take up to their even share of them,
        then the families, in turn, fill what is left. When none has any, wait up to
        ``timeout`` asking each for a short slice at a time (every consumer is polled
        often, so each serves its rebalance callbacks).

        The share first: a flood in the default family filled every call that began
        its turn there, and a critical record waited up to one call per family, each
        a whole batch of the loop's work (behind a flood, critical p99 about 500 ms;
        210 ms with the share first). Only a share: a critical flood still leaves the
        other families the rest of each call."""
        order = self._in_turn()
        found: list[Message] = []
        if len(order) > 1 and num_messages >= len(order):
            share = num_messages // len(order)
            for family in self._first:
                if (consumer := self._consumers.get(family)) is not None:
                    found += consumer.consume(num_messages=share, timeout=0)
        for consumer in order:
            if len(found) >= num_messages:
                break
            found += consumer.consume(num_messages=num_messages - len(found), timeout=0)
        if found or timeout == 0 or not order:
            return found
        deadline = self._clock() + (timeout if timeout > 0 else float("inf"))
        while True:
            for consumer in order:
                left = deadline - self._clock()
                wait = max(0.0, min(self._slice_s, left))
                found = consumer.consume(num_messages=num_messages, timeout=wait)
                if found or left <= 0:
                    return found

    def _in_turn(self) -> list[Consumer]:
        """The consumers, starting one further each call: a busy family must not take
        every fetch from the families after it."""
        consumers = list(self._consumers.values())
        if not consumers:
            return []
        start = next(self._turn) % len(consumers)
        return consumers[start:] + consumers[:start]

    def _by_consumer(
        self, partitions: Iterable[TopicPartition]
    ) -> list[tuple[Consumer, list[TopicPartition]]]:
        grouped: dict[str, list[TopicPartition]] = {}
        for tp in partitions:
            assert tp.topic is not None
            grouped.setdefault(self._family_of(tp.topic), []).append(tp)
        return [(self._consumers[family], tps) for family, tps in grouped.items()]

    def pause(self, partitions: list[TopicPartition]) -> None:
        for consumer, tps in self._by_consumer(partitions):
            consumer.pause(tps)

    def resume(self, partitions: list[TopicPartition]) -> None:
        for consumer, tps in self._by_consumer(partitions):
            consumer.resume(tps)

    def seek(self, partition: TopicPartition) -> None:
        ((consumer, _),) = self._by_consumer([partition])
        consumer.seek(partition)

    def commit(
        self, *, offsets: list[TopicPartition], asynchronous: bool
    ) -> list[TopicPartition] | None:
        """Each family's offsets through its own consumer (the group is the same). Every
        family is tried; the first failure is raised after, as one consumer's would be.
        An asynchronous commit is answered per family, through each one's
        ``on_commit``."""
        committed: list[TopicPartition] = []
        failure: KafkaException | None = None
        for consumer, tps in self._by_consumer(offsets):
            try:
                if asynchronous:
                    consumer.commit(offsets=tps, asynchronous=True)
                else:
                    committed += consumer.commit(offsets=tps, asynchronous=False)
            except KafkaException as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        return None if asynchronous else committed

    def committed(
        self, partitions: list[TopicPartition], timeout: float = -1
    ) -> list[TopicPartition]:
        """The group's committed offsets of ``partitions``: every family's consumer is in
        the one group, so any of them answers for any partition."""
        consumer = next(iter(self._consumers.values()))
        return consumer.committed(partitions, timeout=timeout)

    def assignment(self) -> list[TopicPartition]:
        return [tp for consumer in self._consumers.values() for tp in consumer.assignment()]

    def close(self) -> None:
        """Close every family's consumer (each revokes its own partitions), then raise
        the first failure, if any."""
        failure: Exception | None = None
        for consumer in self._consumers.values():
            try:
                consumer.close()
            except (KafkaException, RuntimeError) as exc:
                failure = failure or exc
        if failure is not None:
            raise failure


# Records librdkafka reads ahead per partition (``queued.min.messages``): a few
# fetches' worth, so a flood cannot queue far ahead of the other partitions.
PREFETCH_RECORDS = 2_000
# How long librdkafka waits to fetch a partition whose read-ahead is full, once
# read below it again (``fetch.queue.backoff.ms``, 1 s by default).
FETCH_BACKOFF_MS = 10


def member_settings(session_timeout_ms: int) -> dict[str, object]:
    """The settings of each family's member of the queue's group."""
    return {
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": session_timeout_ms,
        "heartbeat.interval.ms": max(500, session_timeout_ms // 5),
        # How far librdkafka reads ahead per partition. Its default (100,000
        # records) lets a flooded partition fill the consumer's one queue, and the
        # other partitions' records then wait behind the whole read-ahead. With the
        # default backoff a full read-ahead then waited up to 1 s to be refilled: a
        # flood was read past at 27k records/s, at 115k/s with 10 ms.
        "queued.min.messages": PREFETCH_RECORDS,
        "fetch.queue.backoff.ms": FETCH_BACKOFF_MS,
    }
