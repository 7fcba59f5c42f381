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

from jobcore.kafka import Consumer, KafkaError, KafkaSettings, TopicPartition, make_consumer
from leasekeeper.core.leases import TopicPart
from leasekeeper.deferral.port import DeferralPort
from schemas.codec import EnvelopeCodec
from schemas.job_headers import JobHead, read_head

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
            records = self._read(reader, min(reading.room, self._batch_size))
            if records:
                given += self._port.hand_back(records)
        return given

    def _read(self, reader: _FloodReader, limit: int) -> Records:
        records: Records = []
        for message in reader.consumer.consume(num_messages=limit, timeout=0):
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("reading a deferred flood on %s/%d: %s", reader.tp.topic,
                                reader.tp.partition, error)  # fmt: skip
                continue
            offset, value = message.offset(), message.value()
            if offset is None or value is None:
                continue
            head = read_head(message.key(), message.headers(), value)
            if head is None:
                try:
                    head = JobHead.of(self._codec.decode(value))
                except Exception as exc:  # its schema is unavailable now: read it again
                    log.warning("a deferred record of %s/%d@%d waits: %s", reader.tp.topic,
                                reader.tp.partition, offset, exc)  # fmt: skip
                    reader.seek(offset)
                    return records
            records.append((reader.tp, offset, head, value))
            reader.next = offset + 1
        return records

    def reading(self) -> int:
        """How many partitions a reader reads now."""
        return len(self._readers)

    def close(self) -> None:
        for reader in self._readers.values():
            reader.consumer.close()
        self._readers.clear()
