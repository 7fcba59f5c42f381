"""Durable copies of jobs leaving the ready path: back to the queue, or to its DLQ.

An original offset is resolved only from the delivery report of its copy
(invariant 2), so a crash between "decided to retry" and "copy acked by Kafka"
leaves the original unresolved, and it is delivered again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from jobcore.control import DedupeClaim
from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import KafkaError, Message, Producer, produce_reliably
from jobcore.topics import QueueTopics
from leasekeeper.leases import TopicPart
from schemas.codec import EnvelopeCodec
from schemas.job import DeadLetter, Job

log = logging.getLogger(__name__)

Done = Callable[[bool], None]


def _report(on_done: Done, what: str) -> Callable[[KafkaError | None, Message], None]:
    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            log.warning("copy to %s failed, original stays unresolved: %s", what, err)
        on_done(err is None)

    return delivered


class KafkaRouter:
    """Re-produces failed jobs to the delay tier that fits their backoff, and dead
    letters to ``jobs.Q.dlq``; the job never exists only in local state."""

    def __init__(
        self,
        *,
        producer: Producer,
        codec: EnvelopeCodec,
        topics: QueueTopics,
        tiers: DelayTiers,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._producer = producer
        self._codec = codec
        self._topics = topics
        self._tiers = tiers
        self._clock = clock

    def retry(
        self, job: Job, *, delay_s: float, source: TopicPart, offset: int, on_done: Done
    ) -> None:
        """To ``jobs.Q.retry.<tier>``, the largest tier not longer than ``delay_s``."""
        self._to_tier(job, self._tiers.tier_for(delay_s), on_done)

    def hop(self, job: Job, *, tier: str, on_done: Done) -> None:
        """A delay longer than its tier: wait again, in the tier that fits what is left."""
        self._to_tier(job, tier, on_done)

    def _to_tier(self, job: Job, tier: str, on_done: Done) -> None:
        topic = self._topics.retry(tier)
        produce_reliably(
            self._producer,
            topic,
            key=job.tenant_id.encode(),
            value=self._codec.encode(job),
            headers=[("job_id", job.job_id.encode())],
            on_delivery=_report(on_done, topic),
        )

    def dead(
        self, job: Job, *, reason: str, detail: str, source: TopicPart, offset: int, on_done: Done
    ) -> None:
        letter = DeadLetter(
            envelope=self._codec.encode(job),
            raw_value=None,
            raw_key=None,
            reason=reason,
            detail=detail,
            source_topic=source.topic,
            source_partition=source.partition,
            source_offset=offset,
            died_at_ms=int(self._clock() * 1000),
        )
        self._send_dead(job.tenant_id.encode(), letter, job.job_id, on_done)

    def dead_raw(
        self,
        *,
        key: bytes | None,
        value: bytes | None,
        detail: str,
        source: TopicPart,
        offset: int,
        on_done: Done,
    ) -> None:
        """A record that cannot be decoded: kept byte for byte with the reason."""
        letter = DeadLetter(
            envelope=None,
            raw_value=value,
            raw_key=key,
            reason="undecodable",
            detail=detail,
            source_topic=source.topic,
            source_partition=source.partition,
            source_offset=offset,
            died_at_ms=int(self._clock() * 1000),
        )
        self._send_dead(key, letter, "", on_done)

    def claim_dedupe(self, claim: DedupeClaim, *, on_done: Done) -> None:
        """Record a dedupe key's first job in ``jobs.Q.dedupe`` (compacted, read by all)."""
        produce_reliably(
            self._producer,
            self._topics.dedupe,
            key=claim.key,
            value=claim.encode(),
            on_delivery=_report(on_done, self._topics.dedupe),
        )

    def _send_dead(self, key: bytes | None, letter: DeadLetter, job_id: str, on_done: Done) -> None:
        produce_reliably(
            self._producer,
            self._topics.dlq,
            key=key,
            value=self._codec.encode_dead_letter(letter),
            headers=[("job_id", job_id.encode()), ("reason", letter.reason.encode())],
            on_delivery=_report(on_done, self._topics.dlq),
        )
