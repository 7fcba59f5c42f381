"""The dashboard's index of ``jobs.Q.status``: how each job ended, by job id, in RocksDB.

Built the way Kafka Streams materialises a table: one consumer follows the
status topic of every queue the dashboard is asked about (and every queue with
a live leasekeeper), from the offset stored beside the records, and writes each
batch in one ``WriteBatch``. A lookup is then one RocksDB get instead of a scan
of the topic. Until a queue's index has caught up with the end offset it had
when following began, lookups for that queue fall back to the scan.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

from rocksdict import Options, Rdict, WriteBatch

from jobcore.control import STATUS_SWITCH_KEY, JobStatus, StatusSwitchedOff
from jobcore.kafka import (
    Consumer,
    KafkaException,
    KafkaSettings,
    Message,
    TopicPartition,
    make_consumer,
)
from jobcore.topics import QueueTopics

__all__ = ["StatusIndex"]

log = logging.getLogger(__name__)
_OFFSET = b"\x00offset\x00"


class StatusIndex:
    def __init__(
        self,
        settings: KafkaSettings,
        prefix: str,
        path: Path,
        live_queues: Callable[[], list[str]],
    ) -> None:
        path.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        self._db = Rdict(str(path), options)
        self._settings = settings
        self._prefix = prefix
        self._live = live_queues
        self._wanted: set[str] = set()
        self._followed: dict[str, str] = {}  # topic -> queue
        self._targets: dict[str, int] = {}  # topic -> end offset when following began
        self._positions: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-index", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._db.close()

    def want(self, queue: str) -> None:
        with self._lock:
            self._wanted.add(queue)

    def caught_up(self, queue: str) -> bool:
        topic = QueueTopics(queue=queue, prefix=self._prefix).status
        with self._lock:
            target = self._targets.get(topic)
            return target is not None and self._positions.get(topic, -1) >= target

    def get(self, queue: str, job_id: str) -> JobStatus | None:
        if job_id.encode() == STATUS_SWITCH_KEY:
            return None
        value = self._db.get(_key(queue, job_id))
        return JobStatus.decode(value) if isinstance(value, bytes) else None

    def switched_off(self, queue: str) -> StatusSwitchedOff | None:
        """The queue's status records are switched off (``leasekeeper serve --no-status``)."""
        value = self._db.get(_key(queue, STATUS_SWITCH_KEY.decode()))
        return StatusSwitchedOff.decode(value) if isinstance(value, bytes) else None

    def _run(self) -> None:
        consumer = make_consumer(self._settings, f"dashboard-status.{uuid.uuid4().hex}")
        try:
            while not self._stop.is_set():
                self._follow_new(consumer)
                batch = WriteBatch(raw_mode=True)
                for message in consumer.consume(num_messages=1000, timeout=0.5):
                    self._add(batch, message)
                self._db.write(batch)
                self._note_positions(consumer)
        finally:
            consumer.close()

    def _follow_new(self, consumer: Consumer) -> None:
        with self._lock:
            queues = self._wanted | set(self._live())
        new = []
        for queue in sorted(queues):
            try:
                topic = QueueTopics(queue=queue, prefix=self._prefix).status
            except ValueError as exc:  # a malformed name: never this thread's end
                log.warning("not following queue %r: %s", queue, exc)
                with self._lock:
                    self._wanted.discard(queue)
                continue
            if topic in self._followed:
                continue
            try:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
            except KafkaException as exc:  # no such topic yet: try again next round
                log.debug("not following %s yet: %s", topic, exc)
                continue
            stored = self._db.get(_OFFSET + topic.encode())
            start = max(low, int(stored) + 1) if isinstance(stored, bytes) else low
            self._followed[topic] = queue
            with self._lock:
                self._targets[topic] = high
                self._positions[topic] = start
            new.append(TopicPartition(topic, 0, start))
        if new:
            consumer.incremental_assign(new)

    def _add(self, batch: WriteBatch, message: Message) -> None:
        topic, offset = message.topic(), message.offset()
        if message.error() is not None or topic is None or offset is None:
            return
        key, queue = message.key(), self._followed.get(topic)
        if key is not None and queue is not None:
            value = message.value()
            if value is None:
                batch.delete(_key(queue, key.decode(errors="replace")))
            else:
                batch.put(_key(queue, key.decode(errors="replace")), value)
        batch.put(_OFFSET + topic.encode(), str(offset).encode())

    def _note_positions(self, consumer: Consumer) -> None:
        if not self._followed:
            return
        tps = [TopicPartition(t, 0) for t in self._followed]
        for tp in consumer.position(tps):
            if tp.offset >= 0:
                with self._lock:
                    self._positions[tp.topic] = tp.offset


def _key(queue: str, job_id: str) -> bytes:
    return f"{queue}\x00{job_id}".encode()
