"""Where each durable copy goes and what bytes it carries: back to a delay tier, or to
the queue's DLQ.

An original offset is resolved only from the delivery report of its copy
(commit only past contiguous resolution), so a crash between "decided to retry"
and "copy acked by Kafka"
leaves the original unresolved, and it is delivered again. This module only
builds records; the outbox sends them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from jobcore.control import JobStatus
from jobcore.delay_tiers import DelayTiers
from jobcore.results import result_headers, results_partition
from jobcore.topics import DEFAULT_CLASS, QueueTopics
from leasekeeper.core.copies import (
    SHORT_HISTORY,
    CopyKind,
    CopyRequest,
    Shrink,
    short_history,
    without_payload,
)
from leasekeeper.core.leases import TopicPart
from leasekeeper.ordering.lane import LaneUnavailable, encode_entry
from leasekeeper.ordering.values import LaneEntry, lane_entry
from schemas.codec import EnvelopeCodec
from schemas.confluent import SchemaUnavailable
from schemas.job import DeadLetter, DeadLetterReason, Job
from schemas.job_headers import job_headers


@dataclass(frozen=True, kw_only=True)
class OutRecord:
    topic: str
    key: bytes | None
    value: bytes | None  # None: a tombstone
    headers: tuple[tuple[str, bytes], ...] = ()
    # Set for an overflow copy: partition p of the overflow lane for a job of p, so
    # the lane does not depend on the producer's partitioner matching the enqueuer's.
    partition: int | None = None


class KafkaRouter:
    """Builds the record for a copy: a retry or hop to its class's delay tier
    (``jobs.Q.retry.<tier>``, ``jobs.Q.<class>.retry.<tier>``), dead
    letters to ``jobs.Q.dlq``, dedupe claims to ``jobs.Q.dedupe``; the job never
    exists only in local state. A copy that was too large is rebuilt smaller
    (``Shrink``): a dead letter with a short history, then without the payload."""

    def __init__(
        self,
        *,
        codec: EnvelopeCodec,
        topics: QueueTopics,
        tiers: DelayTiers,
        clock: Callable[[], float] = time.time,
        classes: Sequence[str] = (DEFAULT_CLASS,),
        lane_job: Callable[[LaneEntry], Job] | None = None,
    ) -> None:
        """``lane_job``: the job of a lane entry kept by its place only, read back from
        the lane (``LaneFeed.job_of``) for its copy home; may raise LaneUnavailable."""
        self._codec = codec
        self._lane_job = lane_job
        self._topics = topics
        self._tiers = tiers
        self._clock = clock
        self._classes = frozenset(classes)

    def tier_topic(self, request: CopyRequest) -> str:
        """A retry or a parked job goes to the largest tier not longer than its delay; a
        hop to its tier; both among the tiers of the job's priority class, so it waits
        behind its own class's retries only. A class this leasekeeper does not know
        (a producer configured with more classes) has no tier topics of its own here:
        its jobs wait in the default class's tiers, as they are dispatched in it."""
        tier = request.tier or self._tiers.tier_for(request.delay_s)
        named = request.job if request.job is not None else request.head
        klass = named.priority_class if named is not None else DEFAULT_CLASS
        return self._topics.retry(tier, klass if klass in self._classes else DEFAULT_CLASS)

    def status_copy(self, status: JobStatus) -> CopyRequest:
        """A status record as a copy, for an outbox without a status sender of its own
        (it resolves nothing, so its source is only named in logs)."""
        source = TopicPart(self._topics.status, 0)
        return CopyRequest(kind=CopyKind.STATUS, source=source, offset=0, generation=0,
                           status=status)  # fmt: skip

    def _keyed(self, request: CopyRequest) -> OutRecord:
        """A record of the queue's own keyed topics: a dedupe claim, a status, a result."""
        if request.kind is CopyKind.DEDUPE_CLAIM:
            assert request.claim is not None
            claim = request.claim
            return OutRecord(topic=self._topics.dedupe, key=claim.key, value=claim.encode())
        if request.kind is CopyKind.RESULT:
            assert request.raw_key is not None
            value = request.raw_value
            return OutRecord(topic=self._topics.results, key=request.raw_key, value=value,
                             headers=result_headers(value or b""),
                             partition=results_partition(request.raw_key.decode()))  # fmt: skip
        assert request.status is not None
        status = request.status
        return OutRecord(topic=self._topics.status, key=status.key, value=status.encode())

    def record(self, request: CopyRequest, shrink: Shrink = Shrink.FULL) -> OutRecord:
        kind = request.kind
        if kind in (CopyKind.DEDUPE_CLAIM, CopyKind.STATUS, CopyKind.RESULT):
            return self._keyed(request)
        if kind is CopyKind.DEAD_RAW:
            return self._dead_raw(request, shrink)
        if kind in (CopyKind.LANE, CopyKind.RETURN, CopyKind.LANE_DROP):
            return self._lane(request)  # never shrunk (see CopySender._failed)
        if shrink is Shrink.FULL and kind is CopyKind.OVERFLOW:
            moved = request.job if request.job is not None else request.head
            assert moved is not None
            value = request.raw_value
            if value is None:
                assert request.job is not None
                value = self._codec.encode(request.job)
            return OutRecord(
                topic=self._topics.overflow,
                key=moved.tenant_id.encode(),
                value=value,
                headers=tuple(job_headers(moved, value)),
                partition=request.source.partition,
            )
        if shrink is Shrink.FULL and kind is CopyKind.HOP and request.job is None:
            # A hop of a record read from its headers: the fetched bytes, unchanged.
            head, value = request.head, request.raw_value
            assert head is not None and value is not None
            return OutRecord(
                topic=self.tier_topic(request),
                key=head.tenant_id.encode(),
                value=value,
                headers=tuple(job_headers(head, value)),
            )
        if request.job is None and request.head is not None:
            return self._dead_undecoded(request, shrink)
        assert request.job is not None
        if shrink is Shrink.FULL and kind in (CopyKind.RETRY, CopyKind.HOP, CopyKind.PARK):
            job = request.job
            value = self._codec.encode(job)
            return OutRecord(
                topic=self.tier_topic(request),
                key=job.tenant_id.encode(),
                value=value,
                # The copy's own attempt and run_at: never the original record's headers.
                headers=tuple(job_headers(job, value)),
            )
        return self._dead(request, request.job, shrink)

    def _lane(self, request: CopyRequest) -> OutRecord:
        """An ordered job to the ordering lane, back to its class topic (keyed by tenant,
        so into its line's partition), or its lane record's tombstone."""
        entry = lane_entry(request)
        assert entry is not None
        if request.kind is CopyKind.RETURN:
            job = entry.job
            if job is None:
                if self._lane_job is None:
                    raise LaneUnavailable(f"{entry.record_key}: no lane to read its job from")
                job = self._lane_job(entry)
            value = self._codec.encode(job)
            return OutRecord(topic=entry.line.topic, key=job.tenant_id.encode(), value=value,
                             headers=tuple(job_headers(job, value)))  # fmt: skip
        key = entry.record_key.encode()
        if request.kind is CopyKind.LANE_DROP:
            return OutRecord(topic=self._topics.ordering, key=key, value=None)
        return OutRecord(topic=self._topics.ordering, key=key,
                         value=encode_entry(entry, self._codec))  # fmt: skip

    def _dead(self, request: CopyRequest, job: Job, shrink: Shrink) -> OutRecord:
        reason, detail = request.reason, request.detail
        if request.kind is not CopyKind.DEAD or reason is None:
            # A retry or hop that could not be produced at all: it dies here.
            reason = DeadLetterReason.TOO_LARGE
            last = job.errors[-1].message if job.errors else ""
            where = (
                self._topics.overflow
                if request.kind is CopyKind.OVERFLOW
                else self.tier_topic(request)
            )
            detail = f"its {request.kind.value} copy was too large for {where}; last error: {last}"
        if shrink is Shrink.SHORT_HISTORY:
            job = short_history(job)
            detail += f" [too large: history cut to the last {SHORT_HISTORY} errors]"
        elif shrink is Shrink.NO_PAYLOAD:
            job = without_payload(job)
            detail += " [too large: payload dropped, history cut]"
        letter = self._letter(
            request, envelope=self._codec.encode(job), reason=reason, detail=detail
        )
        return self._to_dlq(job.tenant_id.encode(), letter, job.job_id)

    def _dead_undecoded(self, request: CopyRequest, shrink: Shrink) -> OutRecord:
        """An overflow copy or a hop sent byte for byte (never decoded) was too large for
        its topic: it dies as a dead letter of its decoded job, or byte for byte when
        its envelope does not decode. A schema the registry cannot give now raises
        ``SchemaUnavailable`` instead (the outbox backs off and builds it again)."""
        assert request.head is not None and request.raw_value is not None
        try:
            job = self._codec.decode(request.raw_value)
        except SchemaUnavailable:
            raise  # the bytes may be fine: the outbox tries again once the registry answers
        except Exception as exc:  # DecodeError
            where = (
                self._topics.overflow
                if request.kind is CopyKind.OVERFLOW
                else self.tier_topic(request)
            )
            detail = (
                f"job {request.head.job_id}: its {request.kind.value} copy was too large for "
                f"{where}, and its envelope could not be decoded: "
                f"{type(exc).__name__}: {exc}"
            )
            raw = replace(request, kind=CopyKind.DEAD_RAW, detail=detail,
                          raw_key=request.head.tenant_id.encode())  # fmt: skip
            return self._dead_raw(raw, shrink)
        return self._dead(request, job, shrink)

    def _dead_raw(self, request: CopyRequest, shrink: Shrink) -> OutRecord:
        """A record that cannot be decoded: kept byte for byte with the reason (without
        its value, then its key, if that is too large)."""
        value = request.raw_value if shrink is Shrink.FULL else None
        key = request.raw_key if shrink is not Shrink.NO_PAYLOAD else None
        detail = request.detail
        if shrink is not Shrink.FULL:
            detail += " [too large: bytes dropped]"
        letter = DeadLetter(
            envelope=None,
            raw_value=value,
            raw_key=key,
            reason=DeadLetterReason.UNDECODABLE.value,
            detail=detail,
            source_topic=request.source.topic,
            source_partition=request.source.partition,
            source_offset=request.offset,
            died_at_ms=int(self._clock() * 1000),
        )
        return self._to_dlq(key, letter, "")

    def _letter(
        self, request: CopyRequest, *, envelope: bytes, reason: DeadLetterReason, detail: str
    ) -> DeadLetter:
        return DeadLetter(
            envelope=envelope,
            reason=reason.value,
            detail=detail,
            source_topic=request.source.topic,
            source_partition=request.source.partition,
            source_offset=request.offset,
            died_at_ms=int(self._clock() * 1000),
        )

    def _to_dlq(self, key: bytes | None, letter: DeadLetter, job_id: str) -> OutRecord:
        return OutRecord(
            topic=self._topics.dlq,
            key=key,
            value=self._codec.encode_dead_letter(letter, topic=self._topics.dlq),
            headers=(("job_id", job_id.encode()), ("reason", letter.reason.encode())),
        )
