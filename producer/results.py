"""``JobProducer.result`` and ``producer result``: wait for a job's return value.

Two sources, each read once from where it may hold the job, both from a minute
before the time the job id was built (``jobcore.job_ids``; Kafka's time index,
``offsets_for_times``, says where that is), so finding a job that ended a week ago
reads what was written while it waited and ran, not the week:

- ``jobs.Q.results``, the partition the job id hashes to (``jobcore.results``).
- ``jobs.Q.status`` through ``jobcore.status.StatusReader`` (the reader
  ``producer status`` uses): a dead job (with its dead-letter reason and last
  error), a cancelled one, and a job that succeeded without returning a value.

An id with no time in it (made by another client) is searched for in the whole
window instead: the results topic's retention, the queue's ``--status-retention``
(a week unless set), and the status topic's last ``MAX_SCAN`` records. Every error
that says nothing was found names where it looked.

The leasekeeper sends a job's "succeeded" status only once its result record is
durable: so once a succeeded status is read here, the result, if the handler
returned one, is in the results partition read to its end as it is then (not as
it was when the reader began: the status read may have gone past that point,
since a fetch returns whole batches). Then both are followed until the timeout.

The wait ends in the value, or one of the ``ResultError`` subclasses: ``JobDied``,
``JobCancelled``, ``ResultTimeout`` (a job known to exist: enqueued by this
producer, or ``enqueued=True``) and ``JobUnknown`` (no record of it anywhere in
the windows, for an id this producer did not enqueue: it may never have been
enqueued, may have ended before the window, or may still be waiting).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from jobcore.control import JobEnd, JobStatus
from jobcore.job_ids import search_from_ms
from jobcore.kafka import KafkaException, KafkaSettings, through_transient
from jobcore.result_reader import TURN_S, ResultReader, ResultsUnreadable, window_ms
from jobcore.results import decode_result
from jobcore.status import MAX_SCAN, StatusError, StatusReader
from jobcore.topics import QueueTopics
from schemas.codec import SchemaRegistry

__all__ = [
    "JobCancelled",
    "JobDied",
    "JobUnknown",
    "RecentIds",
    "ResultError",
    "ResultTimeout",
    "wait_for_result",
]

# The least time given to reading what the topics already hold, however short the wait.
LOOK_S = 10.0
# The pause before reading again after a transient broker error.
RETRY_S = 0.5
# What a read that found neither a value nor an end returns.
_NOTHING = object()
# Job ids a producer remembers having enqueued: its ``result`` waits for one of them
# as for a job known to exist (a timeout, never "unknown").
RECENT_IDS = 100_000


class ResultError(Exception):
    """No value for job ``job_id``: the base of every way ``result()`` can fail."""

    def __init__(self, message: str, *, queue: str, job_id: str) -> None:
        super().__init__(message)
        self.queue = queue
        self.job_id = job_id


class JobDied(ResultError):
    """The job was dead-lettered: ``reason`` (the dead-letter reason) and its last error."""

    def __init__(self, message: str, *, queue: str, job_id: str, reason: str,
                 last_error: str) -> None:  # fmt: skip
        super().__init__(message, queue=queue, job_id=job_id)
        self.reason = reason
        self.last_error = last_error


class JobCancelled(ResultError):
    """The job was cancelled (or skipped as a duplicate of ``duplicate_of``)."""

    def __init__(self, message: str, *, queue: str, job_id: str, duplicate_of: str) -> None:
        super().__init__(message, queue=queue, job_id=job_id)
        self.duplicate_of = duplicate_of


class JobUnknown(ResultError):
    """No record of the job in the windows searched (``since_ms`` on): see the module."""

    def __init__(self, message: str, *, queue: str, job_id: str, since_ms: int) -> None:
        super().__init__(message, queue=queue, job_id=job_id)
        self.since_ms = since_ms


class ResultTimeout(ResultError, TimeoutError):
    """The job exists but did not end within the wait."""


class RecentIds:
    """The ids of the jobs a producer enqueued lately, the newest ``limit`` of them."""

    def __init__(self, limit: int = RECENT_IDS) -> None:
        self._ids: dict[str, None] = {}
        self._limit = limit

    def add(self, job_id: str) -> None:
        self._ids[job_id] = None
        if len(self._ids) > self._limit:
            del self._ids[next(iter(self._ids))]

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._ids


class ResultReadError(ResultError):
    """A results or status topic could not be read (missing, not authorised, broker error)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, queue="", job_id="")


def wait_for_result(
    settings: KafkaSettings,
    topics: QueueTopics,
    job_id: str,
    *,
    timeout_s: float,
    known: bool,
    window_s: float | None = None,
    registry: SchemaRegistry | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> object:
    """The value job ``job_id`` returned (None: it returned none), or a ``ResultError``;
    an Avro value is decoded with ``registry`` (``ResultUndecodable`` without it).

    A transient broker error (a leader moving, a broker restarting) starts the read
    again after a pause, until the wait (or ``LOOK_S``, if longer) is over: a caller
    waiting through a broker restart gets the value, not an error."""
    if not job_id:
        raise ValueError("job_id must be a non-empty string")
    deadline = clock() + max(0.0, timeout_s)
    window = round(window_s * 1000) if window_s is not None else window_ms(settings, topics)
    now_ms = int(wall() * 1000)
    since_ms = search_from_ms(job_id, now_ms - window, now_ms)
    by_time = since_ms > now_ms - window  # the id told when the job was built
    queue = topics.queue
    try:
        found = through_transient(
            lambda: _read(settings, topics, job_id, since_ms, by_time=by_time,
                          deadline=deadline, registry=registry, clock=clock),
            until=max(deadline, clock() + LOOK_S), pause_s=RETRY_S, clock=clock, sleep=sleep,
        )  # fmt: skip
    except ResultsUnreadable as exc:
        raise ResultReadError(str(exc)) from None
    except (StatusError, KafkaException) as exc:
        raise ResultReadError(
            f"cannot read the status or result of job {job_id} ({exc}): check that queue "
            f"{queue} exists with all its topics (`producer create-queue --queue {queue} "
            f"--partitions N` adds missing ones, {topics.results} among them)"
        ) from None
    if found is not _NOTHING:
        return found
    if known:
        raise ResultTimeout(f"job {job_id} of queue {queue} did not end within {timeout_s:g}s",
                            queue=queue, job_id=job_id)  # fmt: skip
    raise _unknown(topics, job_id, since_ms, by_time=by_time, timeout_s=timeout_s)


def _read(
    settings: KafkaSettings,
    topics: QueueTopics,
    job_id: str,
    since_ms: int,
    *,
    by_time: bool,
    deadline: float,
    registry: SchemaRegistry | None,
    clock: Callable[[], float],
) -> object:
    """One read of both topics: the value, a ``ResultError`` for a job that ended without
    one, or ``_NOTHING`` once ``deadline`` passed with neither."""
    with (  # the status reader's end first: see the module
        StatusReader(settings, topics.status, since_ms=since_ms if by_time else None) as status,
        ResultReader(settings, topics.results, job_id, since_ms) as results,
    ):
        # What is there already is read whatever the wait (``--wait 0s`` only looks).
        look = max(deadline, clock() + LOOK_S)
        read = status.first if by_time else status.latest
        ended = read(job_id, timeout_s=look - clock())
        # A status read may run past the end its reader began at (a fetch returns
        # whole batches), and a result is durable before its job's status is sent:
        # with a status in hand, the results are read to their end as it is now.
        found = results.catch_up(look, clock) if ended is not None else results.scan(look, clock)
        if found is not None:
            return decode_result(found, registry)
        if ended is not None:
            return _ended(ended, topics.queue)
        while clock() < deadline:
            found = results.next(TURN_S)
            if found is not None:
                return decode_result(found, registry)
            ended = status.wait_for(job_id, TURN_S)
            if ended is not None:
                found = results.catch_up(clock() + LOOK_S, clock)
                return (
                    decode_result(found, registry)
                    if found is not None
                    else _ended(ended, topics.queue)
                )
    return _NOTHING


def _unknown(
    topics: QueueTopics, job_id: str, since_ms: int, *, by_time: bool, timeout_s: float
) -> JobUnknown:
    """The error for a job with no record where it was looked for, naming where."""
    since = _iso(since_ms)
    if by_time:
        searched = (f"no result in {topics.results} and no status in {topics.status} since "
                    f"{since} (a minute before the time its id was built)")  # fmt: skip
    else:
        searched = (f"no result in {topics.results} since {since} (the results window), "
                    f"no status among the last {MAX_SCAN:,} of {topics.status}")  # fmt: skip
    return JobUnknown(
        f"job {job_id} of queue {topics.queue} is unknown: {searched}, and none within "
        f"{timeout_s:g}s. It was not enqueued, ended before the window, or is still "
        "waiting or running",
        queue=topics.queue, job_id=job_id, since_ms=since_ms,
    )  # fmt: skip


def _ended(status: JobStatus, queue: str) -> object:
    """A job's end as ``result()`` gives it: None for a job that succeeded without a value
    (its value would have been read first), an error for the others."""
    job_id = status.job_id
    if status.state is JobEnd.SUCCEEDED:
        return None
    if status.state is JobEnd.DEAD:
        last = f"; last error: {status.last_error}" if status.last_error else ""
        raise JobDied(f"job {job_id} of queue {queue} died ({status.reason or 'dead'}){last}",
                      queue=queue, job_id=job_id, reason=status.reason,
                      last_error=status.last_error)  # fmt: skip
    how = f" as a duplicate of job {status.duplicate_of}" if status.duplicate_of else ""
    raise JobCancelled(f"job {job_id} of queue {queue} was cancelled{how}",
                       queue=queue, job_id=job_id, duplicate_of=status.duplicate_of)  # fmt: skip


def _iso(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
