"""The Kafka side of the leasekeeper: fetch, decode, offer, pause, reap, commit.

One thread owns the consumer. It never blocks on workers: it feeds the engine's
window, pauses the partitions while the window is full (back-pressure), serves
producer delivery reports, runs the lease reaper, and commits each partition at
its lowest unresolved offset on a bounded cadence (not once per job).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from jobcore.kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from jobcore.topics import QueueTopics
from leasekeeper.engine import LeaseEngine
from leasekeeper.leases import TopicPart
from leasekeeper.router import KafkaRouter
from leasekeeper.store import Resolution
from schemas.codec import DecodeError, EnvelopeCodec

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class LoopConfig:
    batch_size: int = 500
    poll_timeout_s: float = 0.05
    commit_interval_s: float = 0.1
    commit_every_resolutions: int = 1000
    reaper_interval_s: float = 0.5


class ConsumerLoop:
    def __init__(
        self,
        *,
        consumer: Consumer,
        producer: Producer,
        engine: LeaseEngine,
        codec: EnvelopeCodec,
        router: KafkaRouter,
        topics: QueueTopics,
        config: LoopConfig,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._consumer = consumer
        self._producer = producer
        self._engine = engine
        self._codec = codec
        self._router = router
        self._topics = topics
        self._config = config
        self._clock = clock
        self._paused = False
        self._last_commit = 0.0
        self._last_reap = 0.0
        self.commits = 0

    def run(self, stop: threading.Event) -> None:
        self._consumer.subscribe(
            [self._topics.ready],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        try:
            while not stop.is_set():
                self._step()
        finally:
            self._shutdown()

    def _step(self) -> None:
        room = self._apply_backpressure()
        # Never fetch more than the window takes: the bound holds in records, and
        # in bytes up to one batch. A paused consumer still serves callbacks.
        messages = self._consumer.consume(
            num_messages=max(1, min(self._config.batch_size, room)),
            timeout=self._config.poll_timeout_s,
        )
        for message in messages:
            self._handle(message)
        self._producer.poll(0)
        now = self._clock()
        if now - self._last_reap >= self._config.reaper_interval_s:
            self._last_reap = now
            self._engine.expire()
        if now - self._last_commit >= self._config.commit_interval_s:
            self._last_commit = now
            self.commit()

    def _handle(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer error: %s", error)
            return
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        assert topic is not None and partition is not None and offset is not None
        tp = TopicPart(topic, partition)
        value = message.value()
        try:
            if value is None:
                raise DecodeError("record has no value (tombstone)")
            job = self._codec.decode(value)
        except DecodeError as exc:
            self._dead_letter_raw(tp, offset, message.key(), value, str(exc))
            return
        self._engine.offer(tp, offset, job, value)

    def _dead_letter_raw(
        self, tp: TopicPart, offset: int, key: bytes | None, value: bytes | None, reason: str
    ) -> None:
        """Undecodable input goes to the DLQ with the reason; the partition keeps moving."""
        generation = self._engine.offer_undecodable(tp, offset)
        if generation is None:
            return
        log.warning("undecodable record %s/%d/%d: %s", tp.topic, tp.partition, offset, reason)

        def done(ok: bool) -> None:
            if ok:
                self._engine.resolve(tp, offset, generation, Resolution.DEAD)
            else:
                self._router.dead_raw(
                    key=key, value=value, detail=reason, source=tp, offset=offset, on_done=done
                )

        self._router.dead_raw(
            key=key, value=value, detail=reason, source=tp, offset=offset, on_done=done
        )

    def _apply_backpressure(self) -> int:
        """Pause every partition while the window is full; returns the room left."""
        room = self._engine.window_room()
        # Hysteresis: pause when full, resume only once half the window is free,
        # so a busy window does not flap between paused and fetching.
        full = room == 0 or (self._paused and room < self._engine.window_records // 2)
        if full != self._paused:
            assignment = self._consumer.assignment()
            if full:
                self._consumer.pause(assignment)
            else:
                self._consumer.resume(assignment)
            self._paused = full
        return room

    def commit(self, only: set[TopicPart] | None = None) -> None:
        positions = self._engine.commit_positions()
        if only is not None:
            positions = {tp: o for tp, o in positions.items() if tp in only}
        if not positions:
            return
        offsets = [TopicPartition(tp.topic, tp.partition, o) for tp, o in positions.items()]
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            log.warning("commit failed (will retry): %s", exc)
            return
        self.commits += 1
        self._engine.committed(positions)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        committed = consumer.committed(partitions, timeout=30)
        for tp in committed:
            self._engine.assign(TopicPart(tp.topic, tp.partition), tp.offset)
        self._paused = False
        log.info("assigned %s", [(tp.topic, tp.partition, tp.offset) for tp in committed])

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        moving = {TopicPart(tp.topic, tp.partition) for tp in partitions}
        self.commit(only=moving)
        for tp in moving:
            self._engine.revoke(tp)
        log.info("revoked %s", sorted((tp.topic, tp.partition) for tp in moving))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._engine.revoke(TopicPart(tp.topic, tp.partition))

    def _shutdown(self) -> None:
        """Stop fetching, deliver pending copies, commit what is resolved, leave the group."""
        try:
            self._producer.flush(10)
            self.commit()
        finally:
            self._consumer.close()
