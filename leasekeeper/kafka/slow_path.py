"""The records the compiled fast path (``fetch_path.gather``) leaves to the loop.

The fast path takes a ready job read from its headers. Everything else comes here,
one record at a time, in offset order: a delay tier's record (dispatched when due,
its partition held until then, or hopped to the tier that fits the wait left), a
record behind a held tier head (noted for ``inspect job``), a job a producer
diverted that waits for its switch (``switch_hold``), an envelope without headers
(decoded), one whose schema the registry cannot give now (its partition held, the
record fetched again later) and an undecodable one (dead-lettered raw).

Holding a partition is the loop's (seek back and pause, ``hold``): it owns the
consumer and what is paused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from jobcore.kafka import Message
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.copy_port import CopyPort
from leasekeeper.core.fetch_port import FetchPort
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.overflow.switch_hold import RECHECK_MS, SwitchHolds
from schemas.codec import DecodeError, EnvelopeCodec
from schemas.confluent import SchemaUnavailable
from schemas.job import Job
from schemas.job_headers import JobHead, read_head, read_switch
from schemas.vocabulary import DeadLetterReason

log = logging.getLogger(__name__)

# How long a partition waits before an envelope whose schema was unavailable is read again.
SCHEMA_RETRY_MS = 5_000


class SlowPath:
    """``hold(tp, offset, until_ms)``: hold a partition at a record until then."""

    def __init__(
        self,
        *,
        fetch: FetchPort,
        copies: CopyPort,
        codec: EnvelopeCodec,
        gate: TierGate,
        switches: SwitchHolds,
        overflow_topic: str,
        hold: Callable[[TopicPart, int, int], None],
    ) -> None:
        self._fetch = fetch
        self._copies = copies
        self._codec = codec
        self._gate = gate
        self._switches = switches
        self._overflow_topic = overflow_topic
        self._hold = hold

    def handle(self, tp: TopicPart, offset: int, message: Message) -> None:
        """A record without an error that the fast path did not take."""
        topic = tp.topic
        if self._gate.is_held(tp):
            self._note_behind_head(tp, offset, message)
            return  # behind a held head: fetched again once the head is due
        if topic == self._overflow_topic and not self._switch_passed(tp, message):
            return  # a diverted job read through its envelope waits as on the fast path
        head = self._read(tp, offset, message)
        if head is None:
            return  # held for its schema, or dead-lettered
        tier = self._gate.tier_of(topic)
        if tier is None:
            value = message.value()
            assert value is not None  # read above
            self._fetch.offer(tp, offset, head, value)
        else:
            self._from_tier(tier, tp, offset, head, message)

    def _switch_passed(self, tp: TopicPart, message: Message) -> bool:
        """Whether an overflow record may be handed out: one a producer diverted waits
        until the ready partition's commit passed its switch (``switch_hold``). When
        it must wait, its partition is held at it (seek back, pause) and fetched
        again a moment later; the records fetched behind it are dropped meanwhile."""
        switch = read_switch(message.headers())
        if switch is None or self._switches.passed(switch):
            return True
        offset: int = message.offset()  # type: ignore[assignment]
        self._hold(tp, offset, self._gate.now_ms() + RECHECK_MS)
        return False

    def _read(self, tp: TopicPart, offset: int, message: Message) -> JobHead | None:
        """The job's head from the record's key and headers; the slow path (older
        producers, or headers of another version) decodes the envelope. None when the
        record was held for its schema or dead-lettered as undecodable."""
        value = message.value()
        if value is not None:
            head = read_head(message.key(), message.headers(), value)
            if head is not None:
                return head
        job = self._decode(tp, offset, message)
        return JobHead.of(job) if job is not None else None

    def _decode(self, tp: TopicPart, offset: int, message: Message) -> Job | None:
        """The whole envelope; None when it was held for its schema or dead-lettered."""
        value = message.value()
        try:
            if value is None:
                raise DecodeError("record has no value (tombstone)")
            return self._codec.decode(value)
        except SchemaUnavailable as exc:
            self._hold_for_schema(tp, offset, str(exc))
        except DecodeError as exc:
            self._dead_letter_raw(tp, offset, message.key(), value, str(exc))
        return None

    def _hold_for_schema(self, tp: TopicPart, offset: int, reason: str) -> None:
        """An envelope whose schema is neither cached nor obtainable (the registry is
        down): the record is fine, so hold its partition and fetch it again later,
        rather than dead-letter a good job; other partitions go on."""
        log.warning("%s/%d@%d waits for its schema: %s", tp.topic, tp.partition, offset, reason)
        self._hold(tp, offset, self._gate.now_ms() + SCHEMA_RETRY_MS)

    def _from_tier(
        self, tier: str, tp: TopicPart, offset: int, job: JobHead, message: Message
    ) -> None:
        """A delay-tier record: dispatch it when due; wait out the last fraction of a tier
        in the engine's timer (the record stays unresolved in Kafka meanwhile); hold the
        partition (seek back, pause) until the head's tier wait is over; or hop to the
        tier that fits the wait that is left."""
        now = self._gate.now_ms()
        value = message.value()
        assert value is not None
        if job.run_at_ms - now < self._gate.tiers.seconds[0] * 1000:
            self._fetch.forget_delayed(job.job_id)
            self._fetch.offer(tp, offset, job, value, not_before_ms=job.run_at_ms)
            return
        _, produced_ms = message.timestamp()
        release_at = self._gate.release_at_ms(
            tier, produced_ms if produced_ms > 0 else now, job.run_at_ms
        )
        if release_at > now:
            self._fetch.note_delayed(tp, offset, job)
            self._hold(tp, offset, release_at)
            return
        hop = self._gate.tiers.next_hop(job.run_at_ms, now)
        assert hop is not None  # not due: checked above
        self._hop(tp, offset, job, value, hop)

    def _note_behind_head(self, tp: TopicPart, offset: int, message: Message) -> None:
        """A tier record fetched behind a held head: not dispatched now, but indexed by
        id so ``inspect job`` finds it. Records of other topics are not noted."""
        value = message.value()
        if value is None or self._gate.tier_of(tp.topic) is None:
            return
        if self._fetch.noted(tp, offset):
            return  # fetched again behind the same head: noted the first time
        head = read_head(message.key(), message.headers(), value)
        if head is None:
            try:
                head = JobHead.of(self._codec.decode(value))
            except (DecodeError, SchemaUnavailable):
                return  # dead-lettered (or held) when its turn comes
        self._fetch.note_delayed(tp, offset, head)

    def _hop(self, tp: TopicPart, offset: int, head: JobHead, value: bytes, hop: str) -> None:
        """Copy the job to tier ``hop``; the original resolves on the copy's delivery.

        A hop changes nothing in the job (its attempt and due time stay), so a record
        read from its headers goes byte for byte, never decoded: a job delayed by
        minutes hops through the short tiers several times, and decoding and encoding
        it at each hop cost more than the rest of its handling. A record read through
        its envelope (an older producer's) is written anew with headers."""
        generation = self._fetch.track_unoffered(tp, offset)
        if generation is None:
            return
        if head.full is not None:
            request = CopyRequest(kind=CopyKind.HOP, source=tp, offset=offset,
                                  generation=generation, job=head.full, tier=hop)  # fmt: skip
        else:
            request = CopyRequest(kind=CopyKind.HOP, source=tp, offset=offset,
                                  generation=generation, head=head, raw_value=value,
                                  tier=hop)  # fmt: skip
        self._copies.add(request)

    def _dead_letter_raw(
        self, tp: TopicPart, offset: int, key: bytes | None, value: bytes | None, reason: str
    ) -> None:
        """Undecodable input goes to the DLQ with the reason; the partition keeps moving."""
        generation = self._fetch.track_unoffered(tp, offset)
        if generation is None:
            return
        log.warning("undecodable record %s/%d/%d: %s", tp.topic, tp.partition, offset, reason)
        self._copies.add(
            CopyRequest(
                kind=CopyKind.DEAD_RAW,
                source=tp,
                offset=offset,
                generation=generation,
                raw_key=key,
                raw_value=value,
                reason=DeadLetterReason.UNDECODABLE,
                detail=reason,
            )
        )
