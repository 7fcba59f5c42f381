"""``wait_for_result`` on the in-memory Kafka: the orders in which a job's records can
land around the wait, each answered with the job's value."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from jobcore.control import JobEnd, JobStatus
from jobcore.job_ids import new_job_id
from jobcore.kafka import KafkaError, KafkaException, KafkaSettings
from jobcore.result_reader import ResultReader, ResultsUnreadable
from jobcore.results import encode_result, result_headers, results_partition
from jobcore.status import StatusReader
from jobcore.topic_admin import ensure_queue_topics
from jobcore.topics import QueueTopics
from memkafka import Cluster, installed
from producer.results import ResultReadError, wait_for_result

SETTINGS = KafkaSettings(bootstrap="memory")
TOPICS = QueueTopics(queue="q")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with installed(Cluster()) as memory:
        ensure_queue_topics(SETTINGS, "q", partitions=1)
        yield memory


def _ends(cluster: Cluster, job_id: str, value: object) -> None:
    """The job ends as the leasekeeper ends it: its result durable, then its status."""
    data = encode_result(value, "render")
    cluster.append(TOPICS.results, results_partition(job_id), job_id.encode(), data,
                   list(result_headers(data)))  # fmt: skip
    status = JobStatus(job_id=job_id, state=JobEnd.SUCCEEDED, at_ms=cluster.now_ms(), attempt=1)
    cluster.append(TOPICS.status, 0, job_id.encode(), status.encode(), None)


def _other_end(cluster: Cluster) -> None:
    other = new_job_id(time.time())
    ended = JobStatus(job_id=other, state=JobEnd.SUCCEEDED, at_ms=cluster.now_ms(), attempt=1)
    cluster.append(TOPICS.status, 0, other.encode(), ended.encode(), None)


def test_a_job_that_ends_as_the_wait_begins_gives_its_value(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job ends after both readers began and before the status reader's first
    fetch, which returns it with the records before it (a fetch is a whole batch): the
    status is past the end the results reader began with. Its value must still be
    read, not None (a job that returned nothing)."""
    job_id = new_job_id(time.time())
    _other_end(cluster)  # the status reader begins with a record to read
    first = StatusReader.first

    def ends_now(reader: StatusReader, wanted: str, timeout_s: float = 30.0) -> object:
        _ends(cluster, job_id, {"pages": 3})
        return first(reader, wanted, timeout_s)

    monkeypatch.setattr(StatusReader, "first", ends_now)
    value = wait_for_result(SETTINGS, TOPICS, job_id, timeout_s=2, known=True, window_s=3600)
    assert value == {"pages": 3}


def test_a_job_that_ended_before_the_wait_gives_its_value(cluster: Cluster) -> None:
    job_id = new_job_id(time.time())
    _ends(cluster, job_id, [1, 2])
    assert wait_for_result(SETTINGS, TOPICS, job_id, timeout_s=2, known=True) == [1, 2]


def test_a_job_that_ends_during_the_wait_gives_its_value(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = new_job_id(time.time())
    wait_for = StatusReader.wait_for

    def ends_now(reader: StatusReader, wanted: str, timeout_s: float) -> object:
        _ends(cluster, job_id, "done")
        return wait_for(reader, wanted, timeout_s)

    monkeypatch.setattr(StatusReader, "wait_for", ends_now)
    assert wait_for_result(SETTINGS, TOPICS, job_id, timeout_s=2, known=True) == "done"


def test_a_broker_error_that_passes_reads_again_and_gives_the_value(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader moving (a broker restarting) fails a read with a retriable error: the
    wait reads again after a pause instead of failing the caller."""
    job_id = new_job_id(time.time())
    _ends(cluster, job_id, {"url": "u"})
    first = StatusReader.first
    failures = [KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))]

    def moving(reader: StatusReader, wanted: str, timeout_s: float = 30.0) -> object:
        if failures:
            raise failures.pop()
        return first(reader, wanted, timeout_s)

    monkeypatch.setattr(StatusReader, "first", moving)
    pauses: list[float] = []
    value = wait_for_result(SETTINGS, TOPICS, job_id, timeout_s=2, known=True,
                            sleep=pauses.append)  # fmt: skip
    assert value == {"url": "u"} and len(pauses) == 1


def test_a_broker_error_that_lasts_past_the_wait_is_a_read_error(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = new_job_id(time.time())
    now = [0.0]

    def moving(reader: StatusReader, wanted: str, timeout_s: float = 30.0) -> object:
        raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))

    def pause(seconds: float) -> None:
        now[0] += seconds

    monkeypatch.setattr(StatusReader, "first", moving)
    with pytest.raises(ResultReadError, match=r"NOT_LEADER_FOR_PARTITION|Not leader"):
        wait_for_result(SETTINGS, TOPICS, job_id, timeout_s=30, known=True,
                        clock=lambda: now[0], sleep=pause)  # fmt: skip
    assert now[0] >= 30, "read again until the wait was over"


def test_a_results_partition_without_a_leader_for_a_moment_is_read_again(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = new_job_id(time.time())
    _ends(cluster, job_id, 7)
    begin = ResultReader.__init__
    calls: list[int] = []

    def leaderless(reader: ResultReader, *args: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            try:
                raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
            except KafkaException as exc:
                raise ResultsUnreadable("cannot read it now") from exc
        begin(reader, *args)

    monkeypatch.setattr(ResultReader, "__init__", leaderless)
    assert wait_for_result(SETTINGS, TOPICS, job_id, timeout_s=2, known=True,
                           sleep=lambda s: None) == 7  # fmt: skip
    assert len(calls) == 2
