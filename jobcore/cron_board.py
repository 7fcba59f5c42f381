"""What a group of cron schedulers keeps in Kafka, in the form every reader shares.

Two compacted topics per scheduler group (``SchedulerOptions.name``):

- ``PREFIX._scheduler.NAME.state``: each entry's last fire, written after its
  job was enqueued; the source of truth a new leader reads before firing;
- ``PREFIX._scheduler.NAME.entries``: each entry as the leader runs it (its
  schedule, time zone, queue, type) with its next and last fire, written at the
  start of a term and after every fire. It is what ``leasekeeper dashboard``
  shows on its Scheduled page, without the schedulers' configuration files.

The scheduler (``producer``) writes both and the dashboard (``leasekeeper``)
reads both; neither imports the other, so the formats live here.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from jobcore.kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    KafkaSettings,
    Message,
    TopicPartition,
    make_consumer,
)

__all__ = [
    "CronEntryView",
    "LastFire",
    "decode_last_fire",
    "encode_last_fire",
    "entries_topic",
    "read_compacted",
    "read_compacted_many",
    "scheduler_names",
    "state_topic",
]

VERSION = 1


def state_topic(prefix: str, name: str) -> str:
    """Compacted; key = entry name, value = its last fire."""
    return f"{prefix}._scheduler.{name}.state"


def entries_topic(prefix: str, name: str) -> str:
    """Compacted; key = entry name, value = the entry as its leader runs it."""
    return f"{prefix}._scheduler.{name}.entries"


def scheduler_names(topics: set[str], prefix: str) -> list[str]:
    """Scheduler groups of ``prefix`` that have a state or an entries topic."""
    start = f"{prefix}._scheduler."
    found = set()
    for topic in topics:
        if topic.startswith(start):
            name, _, kind = topic[len(start) :].rpartition(".")
            if name and kind in ("state", "entries"):
                found.add(name)
    return sorted(found)


@dataclass(frozen=True, kw_only=True)
class LastFire:
    at: datetime
    job_id: str | None = None


def encode_last_fire(fire: LastFire) -> bytes:
    """``{"last_fire_ms": ..., "job_id": ...}``: UTC epoch milliseconds, readable by any tool."""
    record = {"last_fire_ms": round(fire.at.timestamp() * 1000), "job_id": fire.job_id}
    return json.dumps(record, separators=(",", ":")).encode()


def decode_last_fire(value: bytes) -> LastFire:
    """Raises ValueError for a value this module did not write."""
    try:
        record = json.loads(value)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    millis = record.get("last_fire_ms") if isinstance(record, dict) else None
    if not isinstance(millis, int) or isinstance(millis, bool):
        raise ValueError(f"no integer last_fire_ms in {value[:200]!r}")
    job_id = record.get("job_id")
    return LastFire(
        at=datetime.fromtimestamp(millis / 1000, UTC),
        job_id=job_id if isinstance(job_id, str) else None,
    )


@dataclass(frozen=True, kw_only=True)
class CronEntryView:
    """One entry as its leader runs it, published for the dashboard."""

    name: str
    schedule: str
    timezone: str
    queue: str
    type: str
    misfire: str
    next_fire_ms: int | None
    last_fire_ms: int | None = None
    last_job_id: str | None = None
    leader: str = ""  # host:pid of the scheduler that published it
    published_ms: int = 0

    def encode(self) -> bytes:
        return json.dumps(
            {
                "v": VERSION,
                "name": self.name,
                "schedule": self.schedule,
                "timezone": self.timezone,
                "queue": self.queue,
                "type": self.type,
                "misfire": self.misfire,
                "next_fire_ms": self.next_fire_ms,
                "last_fire_ms": self.last_fire_ms,
                "last_job_id": self.last_job_id,
                "leader": self.leader,
                "published_ms": self.published_ms,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, value: bytes) -> CronEntryView:
        """Raises ValueError for a value this module did not write."""
        try:
            record = json.loads(value)
            return cls(
                name=str(record["name"]),
                schedule=str(record["schedule"]),
                timezone=str(record.get("timezone", "UTC")),
                queue=str(record.get("queue", "")),
                type=str(record.get("type", "")),
                misfire=str(record.get("misfire", "")),
                next_fire_ms=_ms(record.get("next_fire_ms")),
                last_fire_ms=_ms(record.get("last_fire_ms")),
                last_job_id=record.get("last_job_id") or None,
                leader=str(record.get("leader", "")),
                published_ms=_ms(record.get("published_ms")) or 0,
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a cron entry record: {value[:200]!r} ({exc})") from None


def _ms(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_compacted(
    settings: KafkaSettings, topic: str, *, timeout: float = 10.0
) -> dict[bytes, bytes]:
    """The latest value of every key of one-partition ``topic`` (tombstones remove keys),
    read to the end the topic had when the call began. Empty for a missing topic."""
    return read_compacted_many(settings, [topic], timeout=timeout)[topic]


def read_compacted_many(
    settings: KafkaSettings, topics: Iterable[str], *, timeout: float = 10.0
) -> dict[str, dict[bytes, bytes]]:
    """``read_compacted`` of several topics with one consumer (a dashboard reads every
    scheduler group's topics on each refresh)."""
    names = list(dict.fromkeys(topics))
    tables: dict[str, dict[bytes, bytes]] = {name: {} for name in names}
    consumer: Consumer = make_consumer(settings, f"cron-board.{uuid.uuid4().hex}")
    try:
        ends = {}
        for name in names:
            try:
                low, high = consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=timeout)
            except KafkaException:  # an absent topic is an empty table
                continue
            if high > low:
                ends[name] = high
        if not ends:
            return tables
        consumer.assign([TopicPartition(name, 0, OFFSET_BEGINNING) for name in ends])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.2):
                _apply(tables, message)
            positions = consumer.position([TopicPartition(name, 0) for name in ends])
            if all(tp.offset >= ends[tp.topic] for tp in positions):
                return tables
        raise TimeoutError(f"could not read {', '.join(ends)} to their ends in {timeout:g}s")
    finally:
        consumer.close()


def _apply(tables: dict[str, dict[bytes, bytes]], message: Message) -> None:
    error = message.error()
    if error is not None:
        if error.code() != KafkaError._PARTITION_EOF:
            raise TimeoutError(f"reading {message.topic()}: {error}")
        return
    topic, key, value = message.topic(), message.key(), message.value()
    if topic is None or key is None or topic not in tables:
        return
    if value is None:
        tables[topic].pop(key, None)
    else:
        tables[topic][key] = value
