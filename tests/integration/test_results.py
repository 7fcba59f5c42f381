"""Job results against the real broker: a handler's return value reaches the caller of
``JobProducer.result`` (and ``producer result``, ``producer status``) whether the job
ended before the call or during it; a dead, cancelled, unknown or late job is its own
error; and a worker killed with ``kill -9`` between its handler's return and its
settle leaves exactly one value, from the run that succeeded."""

from __future__ import annotations

import asyncio
import html
import json
import time
import urllib.parse
import uuid
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from jobcore import status as status_module
from jobcore.control import JobEnd, JobStatus
from jobcore.kafka import KafkaSettings, make_admin, make_producer, topic_config
from jobcore.results import RESULTS_PARTITIONS, results_partition
from jobcore.status import StatusReader
from jobcore.topic_admin import ensure_queue_topics
from jobcore.topics import QueueTopics
from producer import (
    JobCancelled,
    JobDied,
    JobProducer,
    JobRequest,
    JobUnknown,
    ResultError,
    ResultTimeout,
)
from producer.cli import main as producer_cli
from schemas.codec import MARKER, SchemaRegistry
from tests.apps.recording import SCHEMAS
from tests.dashboards import get, served
from tests.system import Leasekeeper, System, WorkerProcess, private_system, wait_until

APP = "tests.apps.returning:app"
HOUR_MS = 3600 * 1000


def start_worker(system: System, name: str, *extra: str, concurrency: int = 4) -> WorkerProcess:
    """A worker of the returning app; a short grace, as a hung handler never returns."""
    args = ["--schema-path", str(SCHEMAS), "--grace", "1s", *extra]
    worker = WorkerProcess(app=APP, target=system.leasekeeper.target,
                           log=system.tmp / f"worker-{name}.log",
                           env={"RECORDING_DIR": str(system.recordings)},
                           concurrency=concurrency, extra_args=args)  # fmt: skip
    system.workers.append(worker.start())
    return worker


def producer(system: System) -> JobProducer:
    return JobProducer(system.kafka, registry=SchemaRegistry(extra_dirs=[SCHEMAS]))


def task(system: System, n: int, **fields: object) -> JobRequest:
    return JobRequest(queue=system.queue, type="task", tenant_id=f"t{n % 3}",
                      payload={"n": n, **fields})  # fmt: skip


def cli(system: System, *args: str) -> tuple[int, str, str]:
    runner = CliRunner()
    answer = runner.invoke(producer_cli, [*args, "--bootstrap", system.kafka.bootstrap])
    return answer.exit_code, answer.stdout, answer.stderr


def test_the_value_of_a_job_that_ended_before_the_call_and_of_one_ending_during_it(
    system: System,
) -> None:
    system.start(workers=0)
    start_worker(system, "a")
    with producer(system) as jobs:
        early = jobs.enqueue(task(system, 1))
        late = jobs.enqueue(task(system, 2, sleep_ms=1500))
        # During the call: the job sleeps 1.5 s in its handler.
        assert jobs.result(system.queue, late, timeout=60)["n"] == 2  # type: ignore[index]
    # Before the call, read by a producer that never saw the job: found in its partition.
    with producer(system) as other:
        value = other.result(system.queue, early, timeout=5)
        assert isinstance(value, dict) and value["n"] == 1 and value["attempt"] == 1
        assert asyncio.run(other.result_async(system.queue, early, timeout=5)) == value
    code, out, _ = cli(system, "result", "--queue", system.queue, early, "--wait", "0s")
    assert code == 0 and json.loads(out) == value
    code, out, _ = cli(system, "status", "--queue", system.queue, early)
    as_json = json.dumps(value, separators=(",", ":"))
    assert code == 0 and f"result {as_json}" in out, out
    # The dashboard's Job page and /api/job, and `producer status --dashboard` through it.
    with served(system) as url, producer(system) as other:
        query = urllib.parse.urlencode({"id": early, "queue": system.queue})
        assert json.loads(json.loads(get(f"{url}/api/job?{query}"))["result"]) == value
        assert as_json in html.unescape(get(f"{url}/job?{query}"))
        assert other.status(system.queue, early, dashboard=url).result == as_json
    # Keyed by job id, in the partition the project's hash names.
    partitions = {m.key(): m.partition() for m in system.read_topic(system.topics.results)}
    assert partitions == {early.encode(): results_partition(early),
                          late.encode(): results_partition(late)}  # fmt: skip


def test_dead_cancelled_unknown_and_late_jobs_are_distinct_errors(system: System) -> None:
    system.start(workers=0)
    start_worker(system, "a")
    with producer(system) as jobs:
        dead = jobs.enqueue(task(system, 1, fail_attempts=1, permanent=True))
        hung = jobs.enqueue(task(system, 2, hang_attempts=5))
        with pytest.raises(JobDied) as died:
            jobs.result(system.queue, dead, timeout=60)
        assert died.value.reason == "permanent error"
        assert "attempt 1 refused for good" in died.value.last_error
        with pytest.raises(ResultTimeout):
            jobs.result(system.queue, hung, timeout=1)
        jobs.cancel(system.queue, hung)
        with pytest.raises(JobCancelled):
            jobs.result(system.queue, hung, timeout=30)
        missing = uuid.uuid4().hex
        with pytest.raises(JobUnknown) as unknown:
            jobs.result(system.queue, missing, timeout=1)
    assert f"no result in {system.topics.results} since 20" in str(unknown.value)
    assert "(the results window)" in str(unknown.value)
    kinds = {JobDied, JobCancelled, JobUnknown, ResultTimeout}
    assert all(issubclass(k, ResultError) for k in kinds) and len(kinds) == 4

    queue = ["--queue", system.queue]
    assert cli(system, "result", *queue, dead, "--wait", "5s")[0] == 4
    assert cli(system, "result", *queue, hung, "--wait", "5s")[0] == 5
    code, _, err = cli(system, "result", *queue, missing, "--wait", "0s")
    assert code == 6 and "unknown" in err
    assert cli(system, "result", *queue, missing, "--wait", "0s", "--enqueued")[0] == 7


def test_kill_9_between_the_return_and_the_settle_leaves_one_value_from_the_run_that_succeeded(
    system: System,
) -> None:
    system.configure(lease_s=2.0, extra=["--retry-base", "0.1s"])
    system.start(workers=0)
    victim = start_worker(system, "victim")
    with producer(system) as jobs:
        job_id = jobs.enqueue(task(system, 7, exit_attempts=1))
        assert victim.process is not None
        marker = system.recordings / f"returned-{victim.process.pid}"
        wait_until(marker.exists, 60, "the first run's handler to return")
        assert marker.read_text() == job_id
        victim.kill()  # SIGKILL: its value was computed and never sent
        survivor = start_worker(system, "survivor")
        value = jobs.result(system.queue, job_id, timeout=90)
    assert survivor.process is not None
    assert value == {"n": 7, "attempt": 2, "pid": survivor.process.pid}
    records = [m for m in system.read_topic(system.topics.results) if m.key() == job_id.encode()]
    assert [json.loads(m.value() or b"") for m in records] == [value]


def test_results_of_jobs_acked_while_the_broker_is_down_are_written_once_it_is_back(
    unique: str, tmp_path: Path
) -> None:
    """A result waits for Kafka however long it is away (the result producer never times
    a record out, since one delivery report answers for a partition's group): the jobs
    acked meanwhile resolve once their results are written, none runs again, and each
    job has one value."""
    count = 24
    with private_system(tmp_path, unique) as (cluster, system):
        # No lease runs out during the outage, and no session: the partitions stay here,
        # so a job runs again only if its result failed (as it would after a lost session).
        system.configure(lease_s=120.0, extra=["--session-timeout-ms", "90000"])
        system.start(workers=0)
        start_worker(system, "w", concurrency=count)
        lk = system.leasekeeper
        with producer(system) as jobs:
            ids = [jobs.enqueue(task(system, n, sleep_ms=3000)) for n in range(count)]
        wait_until(lambda: leases(lk) == count, 60, "every job leased")
        cluster.kill_broker(0)
        wait_until(lambda: acked(lk) == count, 60, "every job acked while Kafka is away")
        cluster.restart_broker(0)
        with producer(system) as jobs:
            values = {job_id: jobs.result(system.queue, job_id, timeout=120) for job_id in ids}
        assert sorted(v["n"] for v in values.values()) == list(range(count))  # type: ignore[index]
        assert {v["attempt"] for v in values.values()} == {1}, "no job ran again"  # type: ignore[index]
        # A batch the broker wrote and could not acknowledge before it died is written
        # again (the same value): the first record is the answer, the others agree with it.
        written: dict[bytes | None, set[bytes | None]] = {}
        for record in system.read_topic(system.topics.results):
            written.setdefault(record.key(), set()).add(record.value())
        assert set(written) == {i.encode() for i in ids}, "every job's value is written"
        assert all(len(found) == 1 for found in written.values()), "one value per job"
        lk.assert_alive()


def test_kill_9_of_the_leasekeeper_while_results_are_on_their_way_loses_no_value(
    system: System,
) -> None:
    """A job counts as done only once its result is durable: after the leasekeeper dies
    with results unsent or unreported, every job still has its value (the jobs whose
    results were in flight run again, and may leave a second record, the first being
    the answer), and the duplicates stay within what was in flight."""
    count, slots = 400, 16
    system.start(workers=0)
    start_worker(system, "w", concurrency=slots)
    with producer(system) as jobs:
        ids = [jobs.enqueue(task(system, n, sleep_ms=20)) for n in range(count)]
    wait_until(lambda: acked(system.leasekeeper) >= count // 4, 60, "a quarter of the jobs")
    system.leasekeeper.kill()  # SIGKILL: results queued, sent or reported, unapplied
    system.restart_leasekeeper()
    system.wait_caught_up(timeout=120)  # every job resolved: committed past
    records = system.read_topic(system.topics.results)
    written = Counter(m.key() for m in records)
    assert set(written) == {i.encode() for i in ids}, "every job's value is written"
    first: dict[bytes | None, object] = {}
    for m in records:
        first.setdefault(m.key(), json.loads(m.value() or b""))
    with producer(system) as jobs:  # callers get the first record's value
        for n in range(0, count, 50):
            assert jobs.result(system.queue, ids[n], timeout=5) == first[ids[n].encode()]
            assert first[ids[n].encode()]["n"] == n  # type: ignore[index]
    twice = sum(n - 1 for n in written.values())
    # Bound: the leases held at the kill, plus the results a poll had not applied yet
    # (a loop turn's worth: at most the worker's slots again).
    assert twice <= 2 * slots, f"{twice} values written twice"


def leases(leasekeeper: Leasekeeper) -> int:
    snapshot = leasekeeper.snapshot()
    return -1 if snapshot is None else sum(len(p["leases"]) for p in snapshot["partitions"])


def acked(leasekeeper: Leasekeeper) -> int:
    snapshot = leasekeeper.snapshot()
    return -1 if snapshot is None else int(snapshot["counters"]["acked"])


def test_a_result_over_the_cap_dead_letters_the_job_saying_where_the_value_belongs(
    system: System,
) -> None:
    system.start(workers=0)
    start_worker(system, "small", "--max-result-bytes", "10")
    with producer(system) as jobs:
        job_id = jobs.enqueue(task(system, 3))
        with pytest.raises(JobDied) as died:
            jobs.result(system.queue, job_id, timeout=60)
    assert died.value.reason == "permanent error"
    assert "ResultTooLarge" in died.value.last_error
    assert "store the value elsewhere" in died.value.last_error


def test_the_results_topic_keeps_results_as_long_as_status_records(
    kafka: KafkaSettings, unique: str
) -> None:
    queue = f"res{unique}"
    topics = QueueTopics(queue=queue)
    ensure_queue_topics(kafka, queue, partitions=2, status_retention_ms=2 * HOUR_MS)
    metadata = make_admin(kafka).list_topics(topics.results, timeout=10)
    assert len(metadata.topics[topics.results].partitions) == RESULTS_PARTITIONS
    assert topic_config(kafka, topics.results)["retention.ms"] == str(2 * HOUR_MS)
    ensure_queue_topics(kafka, queue, partitions=2, status_retention_ms=36 * HOUR_MS)
    assert topic_config(kafka, topics.results)["retention.ms"] == str(36 * HOUR_MS)
    assert topic_config(kafka, topics.status)["retention.ms"] == str(36 * HOUR_MS)


def test_a_queue_without_its_topics_is_a_clear_error(kafka: KafkaSettings, unique: str) -> None:
    with JobProducer(kafka) as jobs, pytest.raises(ResultError) as raised:
        jobs.result(f"none{unique}", "abc", timeout=1)
    assert not isinstance(raised.value, (JobUnknown, ResultTimeout))
    assert f"producer create-queue --queue none{unique}" in str(raised.value)


def stamped(system: System, records: list[tuple[str, int, bytes, bytes, int]]) -> None:
    """Write ``(topic, partition, key, value, timestamp_ms)`` records as traffic of the
    past would have: each with the time it was written."""
    out = make_producer(system.kafka)
    for topic, partition, key, value, at_ms in records:
        out.produce(topic, value, key, partition=partition, timestamp=at_ms)
        out.poll(0)
    assert out.flush(60) == 0


def test_a_job_that_ended_an_hour_of_traffic_before_the_call_is_found_by_the_time_in_its_id(
    system: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its result and status are read from a minute before its id's time: what came
    before is not read (a stale value written two hours earlier under the same id is not
    returned), and what came after does not hide it (more traffic than the status tail
    holds: the tail is scaled down to 2,000 records, the hour to 3,000 ends)."""
    monkeypatch.setattr(status_module, "MAX_SCAN", 2_000)
    system.start(workers=0)
    topics, now_ms = system.topics, int(time.time() * 1000)
    # The hours before: other jobs' ends, and a stale value under an id to come.
    with producer(system) as jobs:
        kept = jobs.enqueue(task(system, 5))
        dead = jobs.enqueue(task(system, 6, fail_attempts=1, permanent=True))
    earlier = [(topics.results, results_partition(kept), uuid.uuid4().hex.encode(), b"1",
                now_ms - 2 * HOUR_MS + i * 1000) for i in range(3_000)]  # fmt: skip
    earlier.insert(1_500, (topics.results, results_partition(kept), kept.encode(),
                           b'{"stale":true}', now_ms - HOUR_MS))  # fmt: skip
    stamped(system, earlier)
    start_worker(system, "a")
    # The jobs end, then an hour of others' ends follows them.
    wait_until(lambda: len(system.read_topic(topics.status)) >= 2, 60, "both jobs to end")
    later = []
    for _ in range(3_000):
        other = uuid.uuid4().hex
        ended = JobStatus(job_id=other, state=JobEnd.SUCCEEDED, at_ms=now_ms, attempt=1)
        later.append((topics.status, 0, other.encode(), ended.encode(), int(time.time() * 1000)))
        later.append((topics.results, results_partition(kept), other.encode(), b"2",
                      int(time.time() * 1000)))  # fmt: skip
    stamped(system, later)
    with producer(system) as caller:  # a producer that never saw the jobs
        value = caller.result(system.queue, kept, timeout=5)
        assert isinstance(value, dict) and value["n"] == 5 and "stale" not in value, value
        with pytest.raises(JobDied):
            caller.result(system.queue, dead, timeout=5)
    code, out, _ = cli(system, "status", "--queue", system.queue, dead)
    assert code == 0 and "dead" in out, out
    # A look by time reads a bounded number of records however much came after.
    with StatusReader(system.kafka, topics.status, since_ms=now_ms - HOUR_MS, most=1_000) as r:
        assert r.first(uuid.uuid4().hex, timeout_s=30) is None
        assert 1_000 <= r.records_read < 1_500, r.records_read  # whole fetches of 500 at most


def test_a_type_with_a_result_schema_returns_avro_that_callers_read_with_its_schema(
    system: System,
) -> None:
    system.start(workers=0)
    start_worker(system, "a")
    render = {"queue": system.queue, "type": "render", "tenant_id": "t1"}
    with producer(system) as jobs:
        good = jobs.enqueue(JobRequest(**render, payload={"pages": 3}))  # type: ignore[arg-type]
        bad = jobs.enqueue(JobRequest(**render, payload={"pages": 1, "wrong_shape": True}))  # type: ignore[arg-type]
        value = jobs.result(system.queue, good, timeout=60)
        assert value == {"url": f"https://files.example/{good}.pdf", "pages": 3,
                         "sizes": [0, 1000, 2000]}  # fmt: skip
        # A value the schema refuses fails the job for good, naming the field.
        with pytest.raises(JobDied) as died:
            jobs.result(system.queue, bad, timeout=60)
        assert "render.result refuses: field 'url' expected string" in died.value.last_error
    (record,) = [m for m in system.read_topic(system.topics.results) if m.key() == good.encode()]
    assert (record.value() or b"")[:2] == MARKER
    assert (
        dict(record.headers() or [])["content-type"] == b"application/avro; encoding=single-object"
    )
    # The shell reads it with the schema, and says what is missing without it.
    queue = ["--queue", system.queue]
    code, out, _ = cli(
        system, "result", *queue, good, "--wait", "0s", "--schema-path", str(SCHEMAS)
    )
    assert code == 0 and json.loads(out) == value
    code, _, err = cli(system, "result", *queue, good, "--wait", "0s")
    assert code == 1 and "unknown schema fingerprint" in err and "--schema-path" in err
    code, out, _ = cli(system, "status", *queue, good, "--schema-path", str(SCHEMAS))
    assert code == 0 and f"result {json.dumps(value, separators=(',', ':'))}" in out, out
