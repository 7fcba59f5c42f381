"""The dashboard's RocksDB index of ``jobs.Q.status`` answers without scanning the topic."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.waiting import wait_until
from jobcore.control import JobEnd, JobStatus
from jobcore.kafka import KafkaSettings, make_producer
from jobcore.topic_admin import ensure_queue_topics
from jobcore.topics import QueueTopics
from leasekeeper.dashboard.status_index import StatusIndex

pytestmark = pytest.mark.kafka


def _write(kafka: KafkaSettings, topic: str, *statuses: JobStatus) -> None:
    producer = make_producer(kafka)
    for status in statuses:
        producer.produce(topic, key=status.key, value=status.encode())
    assert producer.flush(30) == 0


def test_the_index_catches_up_then_follows_new_records(
    kafka: KafkaSettings, unique: str, tmp_path: Path
) -> None:
    queue = f"idx{unique}"
    ensure_queue_topics(kafka, queue, partitions=1)
    topic = QueueTopics(queue=queue).status
    done = JobStatus(job_id="a", state=JobEnd.SUCCEEDED, at_ms=1, attempt=1, worker="w-1")
    _write(kafka, topic, done)
    index = StatusIndex(kafka, "jobs", tmp_path / "index", live_queues=lambda: [])
    index.want(queue)
    index.start()
    try:
        wait_until(lambda: index.caught_up(queue), 30, "the index to catch up")
        assert index.get(queue, "a") == done
        assert index.get(queue, "b") is None
        dead = JobStatus(job_id="b", state=JobEnd.DEAD, at_ms=2, attempt=3, reason="max_attempts")
        _write(kafka, topic, dead)
        wait_until(lambda: index.get(queue, "b") == dead, 30, "the new record in the index")
    finally:
        index.stop()

    # Restarted on the same directory: it continues from the offset it stored.
    again = StatusIndex(kafka, "jobs", tmp_path / "index", live_queues=lambda: [queue])
    try:
        assert again.get(queue, "b") == dead
    finally:
        again.stop()
