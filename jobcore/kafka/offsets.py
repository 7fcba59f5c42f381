"""The loop, the status commands and the dashboard all need to know where a log
stands (its watermarks, a group's commits). One set of readers serves them: batched
where hundreds of partitions are asked about at once, and waiting out a leader
election where a new topic or a restarted broker has no leader yet."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from functools import partial

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from jobcore.kafka.errors import through_transient


def end_offsets(
    consumer: Consumer, topic: str, partitions: Iterable[int], timeout: float = 30.0
) -> dict[int, int]:
    """High watermark of each partition (the offset the next record will get). A
    leader that is still being elected (a new topic, a broker restart) is waited for."""
    result = {}
    deadline = time.monotonic() + timeout
    for p in partitions:
        tp = TopicPartition(topic, p)
        _, result[p] = through_transient(
            partial(consumer.get_watermark_offsets, tp, timeout=10), until=deadline, pause_s=0.1
        )
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
