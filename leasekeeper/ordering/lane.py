"""The ordering lane on Kafka: ``jobs.Q.ordering``, compacted, one partition.

Every ordered job that is out of its line's class partition has one record here,
keyed ``topic|partition|seq``: held behind a blocked head, the head retrying
(with its due time), or the head dead and blocking (``--on-dead block``). The
record carries the whole job, so the lane is a copy of the job like a retry
tier is (the job never lives only in local state). When the job goes back into
its class topic, the owner deletes its record with a tombstone.

Every leasekeeper reads the lane whole (``LaneFeed``), but keeps of it only each
live record's place (partition, seq, lane offset): no job, not even of its own
partitions, so the lane may grow while a key stays blocked without every
leasekeeper holding it. When it is assigned a class partition, it reads the
records of that partition again by their offsets (``load``), on the loop's
thread after the rebalance callback (see ``lane_loads``), so the new owner of a
line knows what of it is out before any of it runs. Records of the owner's own lines
are written by the owner (as copies, through the outbox); the one other writer
is an operator (``leasekeeper ordering skip|replay``), whose records say so
(``writer: operator``) and are applied to the owner's lines.

Values are versioned JSON (the envelope as base64), readable with
``kafka-console-consumer``.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import uuid
from collections.abc import Callable

from jobcore.kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    KafkaSettings,
    Message,
    TopicPartition,
    make_admin,
    make_consumer,
    read_to_end,
)
from leasekeeper.core.leases import TopicPart
from leasekeeper.ordering.values import LaneEntry, LaneState, LineId
from schemas.codec import DecodeError, EnvelopeCodec
from schemas.job import Job

log = logging.getLogger(__name__)

VERSION = 1
OPERATOR = "operator"
# While the lane topic is missing, how often the feed looks for it again (seconds).
RECHECK_S = 30.0
# How long one read of a job back from the lane may take on the loop's thread, and
# how long after one failed the next is not tried (seconds): a lane that does not
# answer must not stall the loop once per job waiting to go home.
JOB_READ_S = 1.0
JOB_READ_QUIET_S = 1.0
# A job read back lies at most this many records ahead of the reader's position:
# read on to it rather than seek (the jobs of a line go home in lane order).
READ_ON_RECORDS = 1_000


class LaneUnavailable(Exception):
    """A lane entry's job cannot be read back from the lane now (not indexed yet, the
    lane not answering): its copy back waits and is built again after a backoff."""


def encode_entry(entry: LaneEntry, codec: EnvelopeCodec, writer: str = "") -> bytes:
    line = entry.line
    if entry.job is None:
        raise ValueError(f"lane entry {entry.record_key} has no job to write")
    return json.dumps(
        {
            "v": VERSION,
            "topic": line.topic,
            "partition": line.partition,
            "tenant": line.tenant,
            "key": line.key,
            "seq": entry.seq,
            "state": entry.state.value,
            "due": entry.due_ms,
            "reason": entry.reason,
            "job_id": entry.job.job_id,
            "writer": writer,
            "job": base64.b64encode(codec.encode(entry.job)).decode(),
        }
    ).encode()


def decode_entry(value: bytes, codec: EnvelopeCodec) -> tuple[LaneEntry, str]:
    """The entry in ``value`` and who wrote it; ValueError, KeyError or DecodeError
    for a record that is not one."""
    record = json.loads(value)
    line = LineId(topic=str(record["topic"]), partition=int(record["partition"]),
                  tenant=str(record["tenant"]), key=str(record["key"]))  # fmt: skip
    entry = LaneEntry(
        line=line,
        seq=int(record["seq"]),
        job=codec.decode(base64.b64decode(record["job"])),
        state=LaneState(record["state"]),
        due_ms=int(record.get("due", 0)),
        reason=str(record.get("reason", "")),
    )
    return entry, str(record.get("writer", ""))


def parse_lane_key(key: bytes) -> tuple[TopicPart, int]:
    topic, partition, seq = key.decode().rsplit("|", 2)
    return TopicPart(topic, int(partition)), int(seq)


class LaneFeed:
    """Reads ``jobs.Q.ordering`` into an index of each live record's lane offset; the
    operator records of the partitions loaded here are also handed to
    ``on_operator`` (the engine applies them to the lines it owns). A ``Feed``."""

    what = "the ordering lane"

    def __init__(
        self,
        *,
        settings: KafkaSettings,
        topic: str,
        codec: EnvelopeCodec,
        on_operator: Callable[[TopicPart, int, LaneEntry | None], None],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._topic = topic
        self._monotonic = monotonic
        self._checked_at = float("-inf")
        self._codec = codec
        self._on_operator = on_operator
        self._settings = settings
        self._consumer = make_consumer(settings, f"ordering-reader-{uuid.uuid4().hex[:8]}")
        self._assigned = False
        self.missing = False
        # Every live record's lane offset, by class partition and seq: its place only.
        self.offsets: dict[TopicPart, dict[int, int]] = {}
        # Partitions loaded here (and not let go since): their operator records count.
        self._owned: set[TopicPart] = set()
        # A ``load`` under way: its partitions, the entries of theirs read so far by
        # lane offset (None: malformed), and the reader's range [_start, _next).
        self._reader: Consumer | None = None
        self._loading: frozenset[TopicPart] = frozenset()
        self._found: dict[int, LaneEntry | None] = {}
        self._start = self._next = -1
        # Jobs read back one by one for their copy home (``job_of``): its own reader,
        # its next offset, and until when it is not tried after a failure.
        self._fetcher: Consumer | None = None
        self._fetch_next = -1
        self._quiet_until = float("-inf")

    def catch_up(self, timeout_s: float = 60.0) -> None:
        """Read every record written so far; TimeoutError if that takes longer. A
        missing topic is looked for again at every call: an operator who creates it
        after the warning must not have to restart the leasekeeper too."""
        if not self._assigned:
            if not self._exists():
                return
            self._assign()
        read_to_end(self._consumer, TopicPartition(self._topic, 0), self._apply, timeout_s)

    def _assign(self) -> None:
        self._consumer.assign([TopicPartition(self._topic, 0, OFFSET_BEGINNING)])
        self._assigned = True

    def _exists(self) -> bool:
        self._checked_at = self._monotonic()
        topics = make_admin(self._settings).list_topics(self._topic, timeout=10).topics
        found = topics.get(self._topic)
        if found is None or (
            found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        ):
            if not self.missing:
                log.warning(
                    "no topic %s: ordered jobs run without their order surviving a "
                    "restart; run `producer create-queue` to add it",
                    self._topic,
                )
            self.missing = True
            return False
        if self.missing:
            log.warning("topic %s exists now: reading the ordering lane", self._topic)
        self.missing = False
        return True

    def poll(self) -> None:
        """Apply what was written since the last call; never waits on the lane. While
        the topic is missing, it is looked for every ``RECHECK_S``."""
        if not self._assigned:
            if not self.missing or self._monotonic() - self._checked_at < RECHECK_S:
                return
            if not self._exists():
                return
            self._assign()
        for message in self._consumer.consume(200, timeout=0):
            self._apply(message)

    def _apply(self, message: Message) -> None:
        key = message.key()
        if message.error() is not None or key is None:
            return
        try:
            tp, seq = parse_lane_key(key)
        except ValueError:
            log.warning("ignoring a record on %s with a malformed key %r", self._topic, key)
            return
        value = message.value()
        if value is None:
            seqs = self.offsets.get(tp)
            if seqs is not None and seqs.pop(seq, None) is not None and not seqs:
                del self.offsets[tp]
            if ("writer", OPERATOR.encode()) in (message.headers() or []):
                self._on_operator(tp, seq, None)
            return
        offset: int = message.offset()  # type: ignore[assignment]  # set: no error
        self.offsets.setdefault(tp, {})[seq] = offset
        if tp not in self._owned:
            return  # not decoded: its job is read again if the partition comes here
        try:
            entry, writer_id = decode_entry(value, self._codec)
        except (ValueError, KeyError, TypeError, DecodeError) as exc:
            log.warning("ignoring a malformed record on %s: %s", self._topic, exc)
            return
        if writer_id == OPERATOR:
            self._on_operator(entry.line.tp, entry.seq, entry)

    # -- the entries of partitions assigned here ------------------------------------

    def load(self, tps: set[TopicPart], timeout_s: float) -> dict[TopicPart, list[LaneEntry]]:
        """The lane entries of ``tps`` (class partitions just assigned), with the lane
        read to its end, each partition's in seq order; from then on their operator
        records go to ``on_operator``. Only their records are read again, from the
        lowest of their offsets on. TimeoutError if that takes longer than
        ``timeout_s``: the next call for the same partitions goes on from there."""
        deadline = time.monotonic() + timeout_s
        if self._loading != frozenset(tps):
            self._loading, self._found, self._start, self._next = frozenset(tps), {}, -1, -1
        while True:
            self.catch_up(max(0.0, deadline - time.monotonic()))
            wanted = {o for tp in tps for o in self.offsets.get(tp, {}).values()}
            missing = wanted - self._found.keys()
            if not missing:
                break
            self._read(missing, deadline)
        loaded: dict[TopicPart, list[LaneEntry]] = {}
        for tp in tps:
            places = sorted(self.offsets.get(tp, {}).items())
            loaded[tp] = [e for _seq, o in places if (e := self._found[o]) is not None]
        self._owned |= tps
        self._loading, self._found, self._start, self._next = frozenset(), {}, -1, -1
        return loaded

    def let_go(self, tps: set[TopicPart]) -> None:
        """Partitions moved away: their operator records no longer count here."""
        self._owned -= tps
        if self._loading & tps:
            self._loading, self._found, self._start, self._next = frozenset(), {}, -1, -1

    def _read(self, missing: set[int], deadline: float) -> None:
        """Read the lane on from where the last call stopped, up to the highest offset
        in ``missing``; from the lowest again when it lies behind (a record compacted
        away meanwhile, whose newer one the next catch-up brings)."""
        low, high = min(missing), max(missing)
        if self._reader is None:
            self._reader = make_consumer(self._settings, f"ordering-load-{uuid.uuid4().hex[:8]}")
        if self._next < 0 or low < self._start or high < self._next:
            self._reader.assign([TopicPartition(self._topic, 0, low)])
            self._start = self._next = low
        while self._next <= high:
            for message in self._reader.consume(500, timeout=0.2):
                offset: int = message.offset()  # type: ignore[assignment]
                if message.error() is None:
                    self._next = offset + 1
                    self._keep(message, offset)
            if self._next <= high and time.monotonic() > deadline:
                raise TimeoutError(f"{self._topic} not read for {sorted(self._loading)} in time")

    def _keep(self, message: Message, offset: int) -> None:
        key, value = message.key(), message.value()
        if key is None or value is None:
            return
        try:
            tp, _seq = parse_lane_key(key)
        except ValueError:
            return
        if tp not in self._loading:
            return
        try:
            self._found[offset] = decode_entry(value, self._codec)[0]
        except (ValueError, KeyError, TypeError, DecodeError) as exc:
            log.warning("ignoring a malformed record on %s: %s", self._topic, exc)
            self._found[offset] = None

    # -- jobs read back by their place ----------------------------------------------

    def job_of(self, entry: LaneEntry) -> Job:
        """The job of a lane entry kept by its place only (``KeyBook(keep_jobs=False)``),
        read from its lane record for its copy back into its class topic; on the loop's
        thread, for at most ``JOB_READ_S``. LaneUnavailable when the record is not
        indexed yet (its write not read back here yet) or the lane does not answer."""
        if entry.job is not None:
            return entry.job
        now = self._monotonic()
        if now < self._quiet_until:
            raise LaneUnavailable(f"{self._topic} did not answer a moment ago")
        offset = self.offsets.get(entry.line.tp, {}).get(entry.seq)
        if offset is None:
            raise LaneUnavailable(f"{entry.record_key} not read from {self._topic} yet")
        try:
            job = self._job_at(offset, entry, time.monotonic() + JOB_READ_S)
        except LaneUnavailable:
            self._quiet_until = self._monotonic() + JOB_READ_QUIET_S
            raise
        except KafkaException as exc:
            self._quiet_until = self._monotonic() + JOB_READ_QUIET_S
            raise LaneUnavailable(f"{self._topic}: {exc}") from exc
        return job

    def _job_at(self, offset: int, entry: LaneEntry, deadline: float) -> Job:
        if self._fetcher is None:
            self._fetcher = make_consumer(self._settings, f"ordering-back-{uuid.uuid4().hex[:8]}")
        if (
            self._fetch_next < 0
            or not self._fetch_next <= offset <= self._fetch_next + READ_ON_RECORDS
        ):
            self._fetcher.assign([TopicPartition(self._topic, 0, offset)])
            self._fetch_next = offset
        while True:
            # One at a time: what follows the job stays in the reader for the next.
            for message in self._fetcher.consume(1, timeout=0.1):
                if message.error() is not None:
                    continue
                at: int = message.offset()  # type: ignore[assignment]  # set: no error
                self._fetch_next = at + 1
                if at < offset:
                    continue
                value = message.value()
                if at > offset or value is None or message.key() != entry.record_key.encode():
                    # Compacted away meanwhile: the feed's index brings the newer record.
                    self._fetch_next = -1
                    raise LaneUnavailable(f"{entry.record_key} moved on {self._topic}")
                try:
                    job = decode_entry(value, self._codec)[0].job
                except (ValueError, KeyError, TypeError, DecodeError) as exc:
                    raise LaneUnavailable(f"{entry.record_key} does not decode: {exc}") from exc
                assert job is not None
                return job
            if time.monotonic() > deadline:
                self._fetch_next = -1
                raise LaneUnavailable(f"{entry.record_key} not read from {self._topic} in time")

    def close(self) -> None:
        self._consumer.close()
        if self._reader is not None:
            self._reader.close()
        if self._fetcher is not None:
            self._fetcher.close()
