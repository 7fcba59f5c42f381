"""Reading ``jobs.Q.status``: how each job ended (succeeded, dead, cancelled).

The leasekeeper writes one status record when a job succeeds, dies or is
cancelled (compacted, keyed by job id, one partition). ``producer cancel`` and
``leasekeeper inspect job`` both read it, so the reader lives here, beside the
Kafka adapter. The read is a scan of the status partition's tail (``MAX_SCAN``
records): cheap for the jobs a person looks up by hand, which are recent.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from jobcore.closing import Closing
from jobcore.control import STATUS_SWITCH_KEY, JobStatus, StatusSwitchedOff
from jobcore.job_ids import search_from_ms
from jobcore.kafka import (
    Consumer,
    KafkaError,
    KafkaSettings,
    Message,
    TopicPartition,
    make_consumer,
    through_transient,
)
from jobcore.topic_admin import STATUS_RETENTION_MS

__all__ = ["MAX_SCAN", "StatusError", "StatusReader", "ended_status", "switched_off_note"]

# The most recent status records a reader looks through.
MAX_SCAN = 1_000_000


class StatusError(RuntimeError):
    """The status topic could not be read (a non-retriable error)."""


class StatusReader(Closing):
    """Reads one queue's status partition: the latest record of a job, then new ones."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        clock: Callable[[], float] = time.monotonic,
        *,
        since_ms: int | None = None,
        most: int | None = None,
    ) -> None:
        """Reads from the last ``MAX_SCAN`` records, or from the first record written at
        or after ``since_ms`` (for one job: ``jobcore.job_ids.search_from_ms``); a scan
        reads ``most`` records at most from there (all to the end when None)."""
        self._topic = topic
        self._clock = clock
        self._consumer: Consumer = make_consumer(settings, f"cancel.{uuid.uuid4().hex}")
        low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        self._start, self._end = max(low, high - MAX_SCAN), high
        if since_ms is not None:
            (at,) = self._consumer.offsets_for_times([TopicPartition(topic, 0, since_ms)], 10)
            self._start = high if at.offset < 0 else max(low, at.offset)
            if most is not None:
                self._end = min(high, self._start + most)
        self._consumer.assign([TopicPartition(topic, 0, self._start)])
        # Records read so far: what a lookup cost, for tests and benchmarks.
        self.records_read = 0
        # Set by ``latest``: the queue's leasekeepers were told to write no records.
        self.switched_off: StatusSwitchedOff | None = None

    def latest(self, job_id: str, timeout_s: float = 30.0) -> JobStatus | None:
        """The last status of ``job_id`` written before this reader started; on the way,
        whether status records are switched off for the queue (``switched_off``)."""
        key = job_id.encode()
        return self._scan(lambda k: k == key, timeout_s).get(job_id)

    def first(self, job_id: str, timeout_s: float = 30.0) -> JobStatus | None:
        """The first status of ``job_id`` from where this reader starts: a job ends once,
        so for a reader started near its id's time this is ``latest`` without reading
        on to the end."""
        key = job_id.encode()
        return self._scan(lambda k: k == key, timeout_s, stop_at_first=True).get(job_id)

    def by_prefix(self, prefix: str, timeout_s: float = 30.0) -> dict[str, JobStatus]:
        """The last status of every job whose id starts with ``prefix``, among the
        ``MAX_SCAN`` most recent records (the window a prefix is looked up in)."""
        start = prefix.encode()
        return self._scan(lambda k: k.startswith(start), timeout_s)

    def _scan(
        self, wanted: Callable[[bytes], bool], timeout_s: float, *, stop_at_first: bool = False
    ) -> dict[str, JobStatus]:
        found: dict[str, JobStatus] = {}
        deadline = self._clock() + timeout_s
        while self._position() < self._end and self._clock() < deadline:
            if stop_at_first and found:
                break
            messages = self._consumer.consume(num_messages=500, timeout=0.2)
            self.records_read += len(messages)
            for message in messages:
                if message.error() is None and message.key() == STATUS_SWITCH_KEY:
                    value = message.value()
                    self.switched_off = StatusSwitchedOff.decode(value) if value else None
                    continue
                key = message.key()
                if message.error() is not None or (key is not None and wanted(key)):
                    status = _status(message, key.decode() if key is not None else "")
                    if status is not None:
                        found[status.job_id] = status
        return found

    def wait_for(self, job_id: str, timeout_s: float) -> JobStatus | None:
        """The first status of ``job_id`` written from now on, within ``timeout_s``."""
        deadline = self._clock() + timeout_s
        while self._clock() < deadline:
            for message in self._consumer.consume(num_messages=500, timeout=0.2):
                status = _status(message, job_id)
                if status is not None:
                    return status
        return None

    def _position(self) -> int:
        (tp,) = self._consumer.position([TopicPartition(self._topic, 0)])
        return max(self._start, int(tp.offset))  # no position before the first fetch

    def close(self) -> None:
        self._consumer.close()


def ended_status(
    settings: KafkaSettings,
    topic: str,
    job_id: str,
    *,
    timeout_s: float = 30.0,
    window_ms: int = STATUS_RETENTION_MS,
    wall: Callable[[], float] = time.time,
) -> tuple[JobStatus | None, StatusSwitchedOff | None]:
    """How job ``job_id`` ended, and whether the queue's status records are switched off.

    Read first from a minute before the time in the job's id (``jobcore.job_ids``),
    however old the job: the ``MAX_SCAN`` records written after it, where a job that
    ran soon after it was built ends. Only when that finds nothing (a job delayed or
    waiting for long, or an id with no time) is the tail read as before: the last
    ``MAX_SCAN`` records, and the switched-off marker, which may be older than the job.
    So a lookup reads at most twice ``MAX_SCAN`` records, however old the job. A
    transient broker error (a leader being elected) reads again, ``timeout_s`` at most."""
    now_ms = int(wall() * 1000)
    since_ms = search_from_ms(job_id, now_ms - window_ms, now_ms)

    def look() -> tuple[JobStatus | None, StatusSwitchedOff | None]:
        if since_ms > now_ms - window_ms:
            with StatusReader(settings, topic, since_ms=since_ms, most=MAX_SCAN) as reader:
                found = reader.first(job_id, timeout_s)
            if found is not None:
                return found, None
        with StatusReader(settings, topic) as reader:
            return reader.latest(job_id, timeout_s), reader.switched_off

    return through_transient(look, until=time.monotonic() + timeout_s)


def switched_off_note(queue: str, at_ms: int) -> str:
    """What every lookup says of a job with no record when the queue writes none."""
    since = ""
    if at_ms > 0:
        since = " since " + datetime.fromtimestamp(at_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (
        f"status records are off for queue {queue}{since} (leasekeeper serve --no-status): "
        "a job that finished is not recorded"
    )


def _status(message: Message, job_id: str) -> JobStatus | None:
    error = message.error()
    if error is not None:
        if error.code() == KafkaError._PARTITION_EOF or error.retriable():
            return None
        raise StatusError(f"reading the status topic failed: {error}")
    if message.key() != job_id.encode() or message.value() is None:
        return None
    value = message.value()
    assert value is not None
    return JobStatus.decode(value)
