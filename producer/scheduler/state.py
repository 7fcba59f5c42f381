"""The last fire of each entry, kept in a compacted Kafka topic.

A leader reads the topic to its end before firing, so a new leader (or a
restarted one) knows where every entry stopped. A record is written after its
job was acknowledged: a crash in between makes the next leader fire that time
again, with the same dedupe key, which is harmless; the reverse order could lose
a fire.
"""

from __future__ import annotations

import logging
import time

from jobcore.cron_board import LastFire, decode_last_fire, encode_last_fire
from jobcore.kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    KafkaSettings,
    Message,
    TopicPartition,
    TopicSpec,
    create_topics,
    make_consumer,
    make_producer,
    produce_reliably,
)
from producer.scheduler.options import SchedulerOptions

__all__ = [
    "KafkaStateLog",
    "LastFire",
    "decode_last_fire",
    "encode_last_fire",
    "ensure_scheduler_topics",
    "read_last_fires",
]

log = logging.getLogger(__name__)

# A fire is recorded before the next one is made; a broker slower than this is
# logged and the loop goes on (a lost record only means a harmless refire).
_RECORD_TIMEOUT_S = 10.0


def ensure_scheduler_topics(settings: KafkaSettings, options: SchedulerOptions) -> None:
    """Create the leader, state and entries topics if missing; one partition each."""
    create_topics(
        settings,
        [
            TopicSpec(name=options.leader_topic, partitions=1),
            TopicSpec(
                name=options.state_topic,
                partitions=1,
                config={"cleanup.policy": "compact"},
            ),
            TopicSpec(
                name=options.entries_topic,
                partitions=1,
                config={"cleanup.policy": "compact"},
            ),
        ],
    )


def read_last_fires(
    settings: KafkaSettings, options: SchedulerOptions, *, timeout: float = 30
) -> dict[str, LastFire]:
    """Every entry's last fire, reading the state topic to its current end.

    An absent topic means nothing has fired yet. Raises TimeoutError when the end
    is not reached within ``timeout`` s (the caller must not fire on a partial view).
    """
    topic = options.state_topic
    consumer = make_consumer(settings, f"{options.group}.state-reader")
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            return {}
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout)
        if high <= low:
            return {}
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        return _read_until(consumer, topic, high, time.monotonic() + timeout)
    finally:
        consumer.close()


def _read_until(consumer: Consumer, topic: str, high: int, deadline: float) -> dict[str, LastFire]:
    fires: dict[str, LastFire] = {}
    while time.monotonic() < deadline:
        for message in consumer.consume(500, timeout=0.2):
            _apply(fires, message)
        [position] = consumer.position([TopicPartition(topic, 0)])
        if position.offset >= high:
            return fires
    raise TimeoutError(f"could not read {topic} to offset {high} in time")


def _apply(fires: dict[str, LastFire], message: Message) -> None:
    error = message.error()
    if error is not None:
        if error.code() != KafkaError._PARTITION_EOF:
            log.warning("reading scheduler state: %s", error)
        return
    key, value = message.key(), message.value()
    if key is None:
        return
    name = key.decode(errors="replace")
    if value is None:  # a tombstone: the entry was forgotten
        fires.pop(name, None)
        return
    try:
        fires[name] = decode_last_fire(value)
    except ValueError as exc:
        log.warning("ignoring scheduler state for %r at offset %s: %s", name, message.offset(), exc)


class KafkaStateLog:
    """Reads and appends last fires.

    Each append waits for its acknowledgement (a few milliseconds): a leader killed
    right after a fire has then recorded it, and its successor does not fire it again.
    """

    def __init__(self, settings: KafkaSettings, options: SchedulerOptions) -> None:
        self._settings = settings
        self._options = options
        self._producer = make_producer(settings)

    def read(self) -> dict[str, LastFire]:
        return read_last_fires(self._settings, self._options)

    def record(self, name: str, fire: LastFire) -> None:
        try:
            produce_reliably(
                self._producer,
                self._options.state_topic,
                key=name.encode(),
                value=encode_last_fire(fire),
                on_delivery=_report,
            )
        except KafkaException as exc:
            log.error("could not record the last fire of %r: %s", name, exc)
            return
        if self._producer.flush(_RECORD_TIMEOUT_S):
            log.error(
                "the last fire of %r was not acknowledged within %gs", name, _RECORD_TIMEOUT_S
            )

    def poll(self) -> None:
        """Serve delivery reports; call it from the loop."""
        self._producer.poll(0)

    def close(self, timeout: float = 10) -> None:
        if self._producer.flush(timeout):
            log.error("some last fires were not recorded within %gs", timeout)


def _report(error: KafkaError | None, message: Message) -> None:
    if error is not None:
        log.error("recording a last fire failed: %s", error)
