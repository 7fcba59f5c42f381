"""Reading ``jobs.Q.results``: one job's result, from the partition its id hashes to.

Shared by every reader of results: ``JobProducer.result`` and ``producer result``
(``producer.results``, which waits), ``producer status`` and the dashboard's Job page
(``stored_result``, which only looks). A reader starts at a time (for a job id with
its time in it, a minute before it: ``jobcore.job_ids``), reads to the partition's end
as it was when it began, then follows it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from jobcore.closing import Closing
from jobcore.job_ids import search_from_ms
from jobcore.kafka import (
    OFFSET_END,
    Consumer,
    ErrorKind,
    KafkaError,
    KafkaException,
    KafkaSettings,
    TopicPartition,
    classify,
    make_consumer,
    topic_config,
)
from jobcore.results import results_partition
from jobcore.topic_admin import STATUS_RETENTION_MS
from jobcore.topics import QueueTopics

__all__ = ["ResultReader", "ResultsUnreadable", "stored_result", "window_ms"]

# How long one read listens to the partition before it checks its deadline.
TURN_S = 0.1


class ResultsUnreadable(RuntimeError):
    """A results topic could not be read (missing, not authorised, broker error)."""


class ResultReader(Closing):
    """The results partition of one job id, from a time on: what is there, then new."""

    def __init__(self, settings: KafkaSettings, topic: str, job_id: str, since_ms: int) -> None:
        self._topic = topic
        self._key = job_id.encode()
        self._partition = results_partition(job_id)
        self._consumer: Consumer = make_consumer(settings, f"result.{uuid.uuid4().hex}")
        tp = TopicPartition(topic, self._partition, since_ms)
        try:
            (start,) = self._consumer.offsets_for_times([tp], timeout=10)
            low, self._end = self._consumer.get_watermark_offsets(tp, timeout=10)
        except KafkaException as exc:
            self._consumer.close()
            if classify(exc) is ErrorKind.TRANSIENT:  # the cause says so to callers
                raise ResultsUnreadable(f"cannot read {topic} now ({exc.args[0]})") from exc
            raise ResultsUnreadable(
                f"cannot read {topic} ({exc.args[0]}): a queue created before job results "
                "has none; `producer create-queue` adds it"
            ) from None
        # No record at or after ``since_ms``: everything there is older; start at the end.
        self._start = self._end if start.offset < 0 else max(low, start.offset)
        self._consumer.assign([TopicPartition(topic, self._partition, self._start)])
        # Records read so far: what a lookup cost, for tests and benchmarks.
        self.records_read = 0

    def scan(self, deadline: float, clock: Callable[[], float]) -> bytes | None:
        """The first result of the job up to the partition's end when this reader began
        (or when ``catch_up`` was last called)."""
        while self._position() < self._end and clock() < deadline:
            found = self.next(TURN_S)
            if found is not None:
                return found
        return None

    def catch_up(self, deadline: float, clock: Callable[[], float]) -> bytes | None:
        """``scan`` again to the partition's end as it is now."""
        _, self._end = self._consumer.get_watermark_offsets(
            TopicPartition(self._topic, self._partition), timeout=10
        )
        return self.scan(deadline, clock)

    def next(self, timeout_s: float) -> bytes | None:
        """The job's result among the records read within ``timeout_s``, if one is."""
        messages = self._consumer.consume(num_messages=500, timeout=timeout_s)
        self.records_read += len(messages)
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF or error.retriable():
                    continue
                raise ResultsUnreadable(f"reading {self._topic} failed: {error}")
            if message.key() == self._key and message.value():
                return message.value()
        return None

    def _position(self) -> int:
        (tp,) = self._consumer.position([TopicPartition(self._topic, self._partition)])
        return self._start if tp.offset < 0 or tp.offset == OFFSET_END else int(tp.offset)

    def close(self) -> None:
        self._consumer.close()


def window_ms(settings: KafkaSettings, topics: QueueTopics) -> int:
    """The results topic's retention: how far back a result can still be."""
    try:
        retention = int(topic_config(settings, topics.results, timeout=10)["retention.ms"])
    except (KafkaException, KeyError, ValueError):
        return STATUS_RETENTION_MS
    return retention if retention > 0 else STATUS_RETENTION_MS


def stored_result(
    settings: KafkaSettings,
    topics: QueueTopics,
    job_id: str,
    *,
    timeout_s: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
) -> bytes | None:
    """The encoded result of a job that ended, if its results partition still has it
    (read up to its end now, within ``timeout_s``): for ``producer status``."""
    now_ms = int(wall() * 1000)
    since_ms = search_from_ms(job_id, now_ms - window_ms(settings, topics), now_ms)
    with ResultReader(settings, topics.results, job_id, since_ms) as results:
        return results.scan(clock() + timeout_s, clock)
