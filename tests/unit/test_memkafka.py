"""The in-memory Kafka (``memkafka``) keeps the client contracts the project relies on.

``tests/integration/test_memkafka_parity.py`` runs the same scenarios against the
real broker; these run in milliseconds, with no broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jobcore.kafka import (
    KafkaError,
    KafkaException,
    KafkaSettings,
    TopicPartition,
    TopicSpec,
    committed_offsets,
    create_topics,
    end_offsets,
    group_offsets,
    make_admin,
    make_consumer,
    make_producer,
    read_to_end,
    watermarks,
)
from memkafka import Cluster, MemoryMessage, installed

SETTINGS = KafkaSettings(bootstrap="memory")
# What the broker's default partitioner gives these keys over six partitions
# (proved against a real broker by tests/integration/test_memkafka_parity.py).
KEY_PARTITIONS = {b"tenant-0": 3, b"tenant-1": 1, b"acme": 2, b"job-42": 5, b"x": 3}


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with installed(Cluster(clock=lambda: 1_700_000_000.0)) as memory:
        yield memory


def _topic(name: str, partitions: int) -> str:
    create_topics(SETTINGS, [TopicSpec(name=name, partitions=partitions)])
    return name


def _drain(consumer: Any, count: int) -> list[MemoryMessage]:
    got: list[MemoryMessage] = []
    for _ in range(count + 5):
        got += consumer.consume(count - len(got), timeout=0)
        if len(got) >= count:
            break
    return got


def test_a_record_goes_round_trip_with_its_key_headers_and_offset(cluster: Cluster) -> None:
    topic = _topic("t", 6)
    producer = make_producer(SETTINGS)
    reports: list[tuple[KafkaError | None, int | None, int]] = []

    def report(error: KafkaError | None, message: MemoryMessage) -> None:
        reports.append((error, message.offset(), message.partition()))

    for key in KEY_PARTITIONS:
        producer.produce(topic, value=b"v-" + key, key=key, headers=[("h", b"1")],
                         on_delivery=report)  # fmt: skip
    assert len(producer) == len(KEY_PARTITIONS) and reports == []
    producer.poll(0)
    assert [e for e, _, _ in reports] == [None] * len(KEY_PARTITIONS)
    consumer = make_consumer(SETTINGS, "g")
    consumer.assign([TopicPartition(topic, p) for p in range(6)])
    got = {m.key(): m for m in _drain(consumer, len(KEY_PARTITIONS))}
    assert {k: m.partition() for k, m in got.items()} == KEY_PARTITIONS
    message = got[b"acme"]
    assert (message.value(), message.headers(), message.error()) == (b"v-acme", [("h", b"1")], None)
    assert message.timestamp() == (1, 1_700_000_000_000)
    assert message.offset() == 0 and message.len() == 6
    assert cluster.records(topic, 3)[1].key == b"x"  # tenant-0 then x share partition 3


def test_keyed_records_land_where_the_real_producer_puts_them(cluster: Cluster) -> None:
    """The same partitioner as librdkafka's default (CRC-32 of the key), so a
    tenant's jobs, retries and dead letters keep their partition."""
    topic = _topic("t", 6)
    landed: dict[bytes, int] = {}
    producer = make_producer(SETTINGS)
    for key in KEY_PARTITIONS:
        remember = lambda _, m: landed.update({m.key(): m.partition()})  # noqa: E731
        producer.produce(topic, key=key, value=b"", on_delivery=remember)
    producer.flush(1)
    assert landed == KEY_PARTITIONS


def test_a_second_member_splits_the_partitions_after_a_revoke_and_assign(cluster: Cluster) -> None:
    topic = _topic("t", 4)
    events: list[tuple[str, str, list[int]]] = []

    def member(name: str) -> Any:
        consumer = make_consumer(SETTINGS, "g")

        def record(what: str) -> Any:
            return lambda _, tps: events.append((name, what, [tp.partition for tp in tps]))

        consumer.subscribe([topic], on_assign=record("assign"), on_revoke=record("revoke"))
        return consumer

    first = member("a")
    first.consume(1, timeout=0)
    second = member("b")
    assert events == [("a", "assign", [0, 1, 2, 3])]  # callbacks wait for a poll
    first.consume(1, timeout=0)
    second.consume(1, timeout=0)
    assert events[1:] == [("a", "revoke", [0, 1, 2, 3]), ("a", "assign", [0, 1]),
                          ("b", "assign", [2, 3])]  # fmt: skip
    second.close()
    first.consume(1, timeout=0)
    assert [tp.partition for tp in first.assignment()] == [0, 1, 2, 3]


def test_a_cooperative_member_gives_up_only_what_moves(cluster: Cluster) -> None:
    topic = _topic("t", 4)
    revoked: list[list[int]] = []
    cooperative = {"partition.assignment.strategy": "cooperative-sticky"}
    first = make_consumer(SETTINGS, "g", **cooperative)
    first.subscribe([topic], on_revoke=lambda _, tps: revoked.append([t.partition for t in tps]))
    first.consume(1, timeout=0)
    second = make_consumer(SETTINGS, "g", **cooperative)
    second.subscribe([topic])
    first.consume(1, timeout=0)
    assert revoked == [[2, 3]]
    assert [tp.partition for tp in first.assignment()] == [0, 1]


def test_a_fenced_member_hears_on_lost_at_its_next_poll_and_joins_again(
    cluster: Cluster,
) -> None:
    topic = _topic("t", 2)
    events: list[tuple[str, list[int]]] = []

    def record(what: str) -> Any:
        return lambda _, tps: events.append((what, [tp.partition for tp in tps]))

    first = make_consumer(SETTINGS, "g")
    first.subscribe([topic], on_assign=record("assign"), on_revoke=record("revoke"),
                    on_lost=record("lost"))  # fmt: skip
    first.consume(1, timeout=0)
    second = make_consumer(SETTINGS, "g")
    second.subscribe([topic])
    first.fence()
    second.consume(1, timeout=0)
    assert [tp.partition for tp in second.assignment()] == [0, 1]  # the survivor's now
    first.consume(1, timeout=0)
    # Rejoined as the newest member, it takes the second half.
    assert events == [("assign", [0, 1]), ("lost", [0, 1]), ("assign", [1])]


def test_a_commit_keeps_its_metadata_and_an_async_one_is_answered_in_poll(cluster: Cluster) -> None:
    topic = _topic("t", 2)
    answers: list[tuple[KafkaError | None, list[tuple[int, int, str]]]] = []
    consumer = make_consumer(SETTINGS, "g", on_commit=lambda err, tps: answers.append(
        (err, [(tp.partition, tp.offset, tp.metadata) for tp in tps])))  # fmt: skip
    consumer.commit(offsets=[TopicPartition(topic, 0, 7, "span")], asynchronous=False)
    (back,) = consumer.committed([TopicPartition(topic, 0)])
    assert (back.offset, back.metadata) == (7, "span")
    consumer.commit(offsets=[TopicPartition(topic, 1, 3, "m")], asynchronous=True)
    assert answers == []
    consumer.consume(1, timeout=0)
    assert answers == [(None, [(1, 3, "m")])]
    assert committed_offsets(consumer, topic, [0, 1]) == {0: 7, 1: 3}
    assert group_offsets(make_admin(SETTINGS), ["g", "none"]) == {
        "g": {(topic, 0): 7, (topic, 1): 3}, "none": {}}  # fmt: skip
    assert cluster.committed("g", topic, 0) == (7, "span")


def test_metadata_over_the_brokers_limit_is_refused_partition_by_partition(
    cluster: Cluster,
) -> None:
    """As ``offset.metadata.max.bytes`` (4096 by default) refuses it: the committer
    shrinks the refused partition's metadata and commits again."""
    topic = _topic("t", 2)
    answers: list[tuple[int | None, list[tuple[int, int | None]]]] = []

    def answered(err: KafkaError | None, tps: list[TopicPartition]) -> None:
        codes = [(tp.partition, tp.error and tp.error.code()) for tp in tps]
        answers.append((err and err.code(), codes))

    consumer = make_consumer(SETTINGS, "g", on_commit=answered)
    big = "m" * 4096
    with pytest.raises(KafkaException) as refused:
        consumer.commit(offsets=[TopicPartition(topic, 0, 5, big)], asynchronous=False)
    assert refused.value.args[0].code() == KafkaError.OFFSET_METADATA_TOO_LARGE
    offsets = [TopicPartition(topic, 0, 5, big), TopicPartition(topic, 1, 5, "m" * 4095)]
    consumer.commit(offsets=offsets, asynchronous=True)
    consumer.consume(1, timeout=0)
    too_large = KafkaError.OFFSET_METADATA_TOO_LARGE
    assert answers == [(too_large, [(0, too_large), (1, None)])]
    assert [tp.offset for tp in consumer.committed(offsets)] == [-1001, 5]


def test_a_new_member_starts_at_the_commit_and_pause_seek_position_hold(cluster: Cluster) -> None:
    topic = _topic("t", 1)
    producer = make_producer(SETTINGS)
    for n in range(5):
        producer.produce(topic, value=str(n).encode())
    make_consumer(SETTINGS, "g").commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    consumer = make_consumer(SETTINGS, "g")
    consumer.subscribe([topic])
    assert [m.offset() for m in consumer.consume(10, timeout=0)] == [2, 3, 4]
    tp = TopicPartition(topic, 0)
    consumer.seek(TopicPartition(topic, 0, 1))
    consumer.pause([tp])
    assert consumer.consume(10, timeout=0) == []
    consumer.resume([tp])
    assert [m.offset() for m in consumer.consume(2, timeout=0)] == [1, 2]
    assert consumer.position([tp])[0].offset == 3
    with pytest.raises(KafkaException):
        consumer.seek(TopicPartition("other", 0, 0))


def test_watermarks_compaction_and_record_deletion(cluster: Cluster) -> None:
    topic = _topic("t", 1)
    producer = make_producer(SETTINGS)
    for key, value in [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"b", None)]:
        producer.produce(topic, key=key, value=value)
    consumer = make_consumer(SETTINGS, "g")
    assert end_offsets(consumer, topic, [0]) == {0: 4}
    cluster.compact(topic)
    assert [(r.offset, r.key, r.value) for r in cluster.records(topic)] == [(2, b"a", b"2")]
    seen: list[int | None] = []
    tp = TopicPartition(topic, 0, 0)
    consumer.assign([tp])
    read_to_end(consumer, tp, lambda m: seen.append(m.offset()), timeout_s=1)
    assert seen == [2]
    admin = make_admin(SETTINGS)
    assert watermarks(admin, [(topic, 0)]) == {(topic, 0): (0, 4)}
    for future in admin.delete_records([TopicPartition(topic, 0, -1)]).values():
        future.result()
    assert watermarks(admin, [(topic, 0)]) == {(topic, 0): (4, 4)}


def test_a_produce_fault_fails_the_next_records_then_clears(cluster: Cluster) -> None:
    topic = _topic("t", 1)
    producer = make_producer(SETTINGS)
    outcomes: list[Any] = []
    cluster.fail_produces(topic, KafkaError.NOT_ENOUGH_REPLICAS, count=2)
    for _ in range(3):
        producer.produce(topic, value=b"v", on_delivery=lambda e, m: outcomes.append(
            None if e is None else e.code()))  # fmt: skip
    producer.flush(1)
    assert outcomes == [KafkaError.NOT_ENOUGH_REPLICAS] * 2 + [None]
    assert len(cluster.records(topic)) == 1
    cluster.fail_produces(topic, KafkaError.MSG_SIZE_TOO_LARGE, raised=True)
    with pytest.raises(KafkaException):
        producer.produce(topic, value=b"v")


def test_topics_are_created_once_and_unknown_ones_are_reported(cluster: Cluster) -> None:
    _topic("t", 3)
    _topic("t", 3)  # "already exists" is success
    topics = make_admin(SETTINGS).list_topics(timeout=1).topics
    assert sorted(topics["t"].partitions) == [0, 1, 2] and topics["t"].error is None
    errors: list[int] = []
    make_producer(SETTINGS).produce("missing", value=b"v",
                                    on_delivery=lambda e, m: errors.append(e.code()))  # fmt: skip
    assert errors == []
    with pytest.raises(NotImplementedError, match="alter_consumer_group_offsets"):
        make_admin(SETTINGS).alter_consumer_group_offsets([])


def test_uninstalling_brings_back_the_real_clients() -> None:
    with installed(Cluster()):
        assert type(make_admin(SETTINGS)).__name__ == "MemoryAdmin"
    assert type(make_admin(SETTINGS)).__name__ == "AdminClient"


def test_a_memory_consumer_is_given_the_config_the_real_one_would_be(cluster: Cluster) -> None:
    """The seam hands over the factory's whole config dict: manual commits, the reset
    policy, the ``on_commit`` callback are read from it as librdkafka reads them."""
    seen: list[dict[str, Any]] = []
    real = cluster.consumer
    cluster.consumer = lambda config: seen.append(config) or real(config)  # type: ignore[method-assign]
    make_consumer(SETTINGS, "g", on_commit=print)
    (config,) = seen
    assert config["group.id"] == "g" and config["on_commit"] is print
    assert config["enable.auto.commit"] is False and config["auto.offset.reset"] == "earliest"
