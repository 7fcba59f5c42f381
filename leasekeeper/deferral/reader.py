"""The second reader of a partition whose flood is deferred: it reads the deferred
records again from Kafka, in order, and hands them back as the tenant's share of the
window frees (``floods.py``).

One consumer per deferred partition, assigned (not subscribed: it is no member of
the group and commits nothing), opened at the first deferred offset and closed when
the deferral ends or the partition moves. It reads only as many records a step as
the tenant may take back, so a flood is never held in memory twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from jobcore.kafka import (
    Consumer,
    KafkaError,
    KafkaSettings,
    Message,
    TopicPartition,
    make_consumer,
)
from leasekeeper.core.leases import TopicPart
from leasekeeper.deferral.floods import Reading
from leasekeeper.deferral.port import DeferralPort
from schemas.codec import DecodeError, EnvelopeCodec
from schemas.confluent import SchemaUnavailable
from schemas.job_headers import Headers, JobHead, read_head

log = logging.getLogger(__name__)

__all__ = ["DeferredReaders", "flood_reader"]

Records = list[tuple[TopicPart, int, JobHead, bytes]]

# Other tenants' records between two deferred ones are read past, not sought past: a
# seek drops what the consumer fetched ahead. Only a gap wider than this is sought.
SEEK_GAP = 10_000


def flood_reader(settings: KafkaSettings, group_id: str) -> Consumer:
    """A consumer to read a deferred flood again: assigned, never subscribed (no member
    of the group), it commits nothing, and fetches ahead no more than a few MB."""
    limits = {"queued.max.messages.kbytes": 4096, "fetch.queue.backoff.ms": 10}
    return make_consumer(settings, group_id, **limits)


class _FloodReader:
    def __init__(self, consumer: Consumer, tp: TopicPart, offset: int) -> None:
        self.consumer = consumer
        self.tp = tp
        self.next = offset  # the offset the next record read has, at least
        consumer.assign([TopicPartition(tp.topic, tp.partition, offset)])

    def seek(self, offset: int) -> None:
        self.consumer.seek(TopicPartition(self.tp.topic, self.tp.partition, offset))
        self.next = offset


class DeferredReaders:
    def __init__(
        self,
        *,
        port: DeferralPort,
        open_consumer: Callable[[], Consumer],
        codec: EnvelopeCodec,
        slice_: Callable[[], int],
        window_records: int,
        batch_size: int,
    ) -> None:
        """``slice_``: each partition's slice of the window now (it changes with the
        assignment)."""
        self._window_records = window_records
        self._port = port
        self._open = open_consumer
        self._codec = codec
        self._slice = slice_
        self._batch_size = batch_size
        self._readers: dict[tuple[TopicPart, int], _FloodReader] = {}

    def step(self) -> int:
        """Hand back what each deferred partition may take now; returns how many."""
        readings = self._port.reading(self._slice(), self._window_records)
        live = {(r.tp, r.generation) for r in readings}
        for key in [k for k in self._readers if k not in live]:
            self._readers.pop(key).consumer.close()  # ended, or the partition moved
        given = 0
        for reading in readings:
            if reading.room <= 0:
                continue
            key = (reading.tp, reading.generation)
            reader = self._readers.get(key)
            if reader is None:
                reader = self._readers[key] = _FloodReader(self._open(), reading.tp, reading.first)
            elif reader.next > reading.first or reading.first - reader.next > SEEK_GAP:
                # Behind: a record could not be read last time. Far ahead: a later
                # deferral, past records handed back already.
                reader.seek(reading.first)
            records = self._read(reader, reading, min(reading.room, self._batch_size))
            if records:
                given += self._port.hand_back(records)
        return given

    def _read(self, reader: _FloodReader, reading: Reading, limit: int) -> Records:
        """The deferred tenant's records among the next ``limit`` read, with their heads.
        Other tenants' records are passed over unread. One that cannot be decoded goes
        to the DLQ; one whose schema cannot be had now is read again next time.

        The reader starts at or before the first deferred offset, and Kafka returns a
        partition's records in offset order: a record past that offset, read before
        it, means it is gone (retention or compaction deleted it)."""
        records: Records = []
        seen_first = False
        for message in reader.consumer.consume(num_messages=limit, timeout=0):
            offset, value = message.offset(), message.value()
            if _failed(message, reader.tp) or offset is None or offset < reading.first:
                continue
            if not seen_first:
                seen_first = True
                if offset > reading.first:
                    log.warning("deferred record %s/%d@%d is no longer in Kafka", reader.tp.topic,
                                reader.tp.partition, reading.first)  # fmt: skip
                    self._port.gone(reader.tp, reading.first)
            reader.next = offset + 1
            if message.key() != reading.key:
                continue  # another tenant's: read past the first time
            try:
                head = self._head(message.key(), message.headers(), value or b"")
            except SchemaUnavailable as exc:
                log.warning("a deferred record of %s/%d@%d waits for its schema: %s",
                            reader.tp.topic, reader.tp.partition, offset, exc)  # fmt: skip
                reader.seek(offset)
                return records
            except DecodeError as exc:
                # Dead-lettered once it is the next deferred record (else read again).
                self._port.dead_letter(reader.tp, offset, (message.key(), value), str(exc))
                continue
            records.append((reader.tp, offset, head, value or b""))
        return records

    def _head(self, key: bytes | None, headers: Headers | None, value: bytes) -> JobHead:
        """From the headers; from the envelope for a record without usable ones."""
        head = read_head(key, headers, value)
        return head if head is not None else JobHead.of(self._codec.decode(value))

    def reading(self) -> int:
        """How many partitions a reader reads now."""
        return len(self._readers)

    def close(self) -> None:
        for reader in self._readers.values():
            reader.consumer.close()
        self._readers.clear()


def _failed(message: Message, tp: TopicPart) -> bool:
    """An error event rather than a record (end of partition: nothing to say)."""
    error = message.error()
    if error is not None and error.code() != KafkaError._PARTITION_EOF:
        log.warning("reading a deferred flood on %s/%d: %s", tp.topic, tp.partition, error)
    return error is not None
