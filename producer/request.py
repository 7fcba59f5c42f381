"""What a caller asks to enqueue, how it becomes a :class:`~schemas.job.Job`, and
which topic that job is written to.

Kept apart from the Kafka client so the rules (limits, scheduling, routing,
payload validation) are pure functions with their own unit tests.

A job that may not run yet is written to a delay tier (``jobs.Q.retry.<tier>``)
with its due time in ``run_at_ms``; the leasekeeper releases it from there at that
time, exactly as it releases a retry. Nothing of the delay lives in the producer.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

from jobcore.config import DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT_S
from jobcore.delay_tiers import MAX_DELAY, DelayTiers
from jobcore.priority import PriorityClasses
from jobcore.topics import DEFAULT_CLASS, QueueTopics
from jobcore.tracing import current_trace
from schemas.codec import EnvelopeCodec
from schemas.job import Job

__all__ = ["MAX_DELAY", "EnqueueOptions", "JobRequest", "as_request", "build_job", "destination"]

_INT32 = (-(2**31), 2**31 - 1)
# An ordering key names a line of jobs (a user, an account): an id, not a document.
MAX_ORDERING_KEY = 256
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, kw_only=True)
class JobRequest:
    """One job to enqueue. Checked on construction, so a bad batch fails before any send."""

    queue: str
    type: str
    payload: Mapping[str, object]
    tenant_id: str
    dedupe_key: str | None = None
    run_at: datetime | None = None
    delay: timedelta | float | None = None
    # A priority class name (critical, default, bulk, or as JOBS_PRIORITY_CLASSES names
    # them): the class's own topic and weight. None is the default class.
    priority: str | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    timeout_s: float = DEFAULT_TIMEOUT_S
    # Jobs of this queue and tenant with the same key run one at a time, in enqueue
    # order (docs/ordering.md). None: no ordering.
    ordering_key: str | None = None

    def __post_init__(self) -> None:
        _check_queue_name(self.queue)
        if not self.type:
            raise ValueError("type must name a job type")
        if not self.tenant_id:
            raise ValueError("tenant_id must be a non-empty string: it is the partition key")
        if self.dedupe_key == "":
            raise ValueError("dedupe_key must be None or a non-empty string")
        self._check_limits()
        self._check_schedule()
        self._check_ordering()

    def _check_limits(self) -> None:
        # Envelope fields are Avro ints: an out-of-range value would not round-trip.
        if not 1 <= self.max_attempts <= _INT32[1]:
            raise ValueError(
                f"max_attempts must be >= 1 (and fit an int32), got {self.max_attempts}"
            )
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise ValueError(
                f"timeout_s must be a positive number of seconds, got {self.timeout_s}"
            )
        if self.priority is not None and (not isinstance(self.priority, str) or not self.priority):
            raise ValueError(
                f"priority takes a priority class name (e.g. critical, default, bulk), "
                f"got {self.priority!r}"
            )

    def _check_schedule(self) -> None:
        if self.run_at is not None and self.delay is not None:
            raise ValueError("give run_at or delay, not both")
        if self.run_at is not None and self.run_at.utcoffset() is None:
            # A naive datetime means local time on one machine and UTC on another.
            raise ValueError(
                "run_at must be timezone-aware: use an aware datetime, e.g. datetime.now(UTC)"
            )
        if self.delay is not None:
            if isinstance(self.delay, bool):
                raise ValueError("delay must be seconds or a timedelta, got a bool")
            seconds = _seconds(self.delay)
            if not math.isfinite(seconds) or seconds < 0:
                raise ValueError(f"delay must be >= 0 seconds, got {self.delay}")
            _check_horizon(seconds, "delay")

    def _check_ordering(self) -> None:
        if self.ordering_key is None:
            return
        if not isinstance(self.ordering_key, str) or not self.ordering_key:
            raise ValueError(
                f"ordering_key must be None or a non-empty string, got {self.ordering_key!r}"
            )
        if len(self.ordering_key) > MAX_ORDERING_KEY:
            raise ValueError(
                f"ordering_key is {len(self.ordering_key)} characters; at most "
                f"{MAX_ORDERING_KEY} are allowed (use an id, e.g. user-42)"
            )
        if self.run_at is not None or self.delay is not None:
            # A delayed job waits in a delay tier, outside its key's line: it could
            # neither keep its place nor hold the jobs behind it.
            raise ValueError(
                "an ordered job (ordering_key) runs in enqueue order and cannot be delayed: "
                "drop run_at/delay, or enqueue it later"
            )

    def delay_s(self, now: float) -> float:
        """Seconds from ``now`` (epoch seconds) until the job may run; <= 0 means now."""
        if self.run_at is not None:
            return self.run_at.timestamp() - now
        return 0.0 if self.delay is None else _seconds(self.delay)

    def due_ms(self, now: float) -> int | None:
        """When a job that may not run yet is due (epoch ms, rounded up so it never
        runs early), or None when it is due at ``now``."""
        delay_s = self.delay_s(now)
        if delay_s <= 0:
            return None
        _check_horizon(delay_s, "run_at")
        if self.run_at is not None:  # exact: no float round trip through timestamp()
            micros = (self.run_at - _EPOCH) // timedelta(microseconds=1)
            return -(-micros // 1000)
        # Added below the whole milliseconds: at 1.7e12 ms a float has no room left
        # for a sub-millisecond delay, which would then round away to "now". Rounded
        # to nanoseconds first, so float noise (2.007 s is 2007.0000000000002 ms) does
        # not add a millisecond.
        now_ms = int(now * 1000)
        return now_ms + math.ceil(round(now * 1000 - now_ms + delay_s * 1000, 6))


def _seconds(delay: timedelta | float) -> float:
    return delay.total_seconds() if isinstance(delay, timedelta) else float(delay)


def _check_horizon(delay_s: float, what: str) -> None:
    if delay_s > MAX_DELAY.total_seconds():
        raise ValueError(
            f"{what} is {delay_s / 86400:.1f} days ahead; at most {MAX_DELAY.days} days are "
            "allowed, as long as cancellations are kept (is the unit right? a float delay "
            "is seconds)"
        )


def build_job(
    request: JobRequest,
    *,
    codec: EnvelopeCodec,
    now: float,
    job_id: str,
    classes: PriorityClasses | None = None,
) -> Job:
    """The envelope for ``request``; raises PayloadError (or ValueError for a ``run_at``
    too far ahead, or a priority class not in ``classes``) before anything could be
    sent. ``enqueue`` checks the class where it picks the topic; a staged job has no
    topic yet, so staging passes its ``classes`` here.

    ``run_at_ms`` is ``now`` for a job due now, else its due time: a job is delayed
    exactly when ``run_at_ms > created_at_ms`` (see :func:`destination`).
    """
    if classes is not None and request.priority is not None:
        classes.check(request.priority)
    now_ms = int(now * 1000)
    due_ms = request.due_ms(now)
    return Job(
        job_id=job_id,
        queue=request.queue,
        tenant_id=request.tenant_id,
        type=request.type,
        payload=codec.encode_payload(request.type, request.payload),
        priority_class=request.priority or DEFAULT_CLASS,
        run_at_ms=now_ms if due_ms is None else due_ms,
        max_attempts=request.max_attempts,
        timeout_s=float(request.timeout_s),
        dedupe_key=request.dedupe_key,
        created_at_ms=now_ms,
        trace=current_trace(),
        ordering_key=request.ordering_key,
    )


def destination(job: Job, topics: QueueTopics, tiers: DelayTiers) -> str:
    """The topic ``job`` is written to: its priority class's topic when it is due, else
    its class's delay tier for its wait (the largest tier not longer than it): each
    class has tiers of its own, so a critical delayed job never waits behind bulk
    ones; it comes back into its own class from there (the class travels in the
    envelope).

    A wait longer than the largest tier is fine: the leasekeeper re-produces
    ("hops") the job through the tiers until it is due. ``tiers`` must be the
    leasekeeper's ``--retry-tiers``: it reads only the topics of its own tiers.
    """
    wait_ms = job.run_at_ms - job.created_at_ms
    if wait_ms <= 0:
        return topics.of_class(job.priority_class)
    return topics.retry(tiers.tier_for(wait_ms / 1000), job.priority_class)


@functools.lru_cache(maxsize=1024)
def _check_queue_name(queue: str) -> None:
    """Raise ValueError for a name no topic can have; a name that passed is not checked
    again (a request is built per enqueue, mostly for the same few queues)."""
    QueueTopics(queue=queue)


class _Required(TypedDict):
    tenant_id: str


class EnqueueOptions(_Required, total=False):
    """The keyword options of ``enqueue(queue, type, payload, **options)``: the fields of
    :class:`JobRequest` after its first three, which holds their defaults and checks
    (a unit test keeps the two in step). ``tenant_id`` is required. (Not ``Required[]``:
    with postponed annotations, Python 3.11 does not see it.)"""

    dedupe_key: str | None
    run_at: datetime | None
    delay: timedelta | float | None
    priority: str | None
    max_attempts: int
    timeout_s: float
    ordering_key: str | None


def as_request(
    queue: str | JobRequest,
    job_type: str | None,
    payload: Mapping[str, object] | None,
    options: Mapping[str, Any],
) -> JobRequest:
    """The one place the job options become a :class:`JobRequest`, whichever way
    :meth:`JobProducer.enqueue` was called."""
    if isinstance(queue, JobRequest):
        if job_type is not None or payload is not None or options:
            raise TypeError("give a JobRequest alone, or queue, type, payload and options")
        return queue
    if job_type is None or payload is None:
        raise TypeError("enqueue needs queue, type and payload (or one JobRequest)")
    return JobRequest(queue=queue, type=job_type, payload=payload, **options)
