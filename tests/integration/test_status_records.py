"""Status records on ``jobs.Q.status`` against the real broker: the duration is the
handler's own run time from the worker's settlement; the topic's retention is set
at creation and updated on request; ``--no-status`` writes no record, and every
lookup then says that records are off instead of only "not found yet"."""

from __future__ import annotations

import re
import time
from pathlib import Path

from click.testing import CliRunner, Result

from jobcore.control import STATUS_SWITCH_KEY, JobStatus
from jobcore.kafka import KafkaSettings, topic_config
from jobcore.topic_admin import STATUS_RETENTION_MS, ensure_queue_topics
from jobcore.topics import QueueTopics
from leasekeeper.dashboard.actions import Actions
from leasekeeper.dashboard.fleet_view import FleetState
from leasekeeper.dashboard.job_lookup import lookup as dashboard_lookup
from leasekeeper.dashboard.status_index import StatusIndex
from producer import JobProducer
from producer.cli import main as producer_cli
from schemas.codec import EnvelopeCodec, SchemaRegistry
from tests.apps.recording import read_log
from tests.system import System, wait_until

SLEEP_MS = 400
HOUR_MS = 3600 * 1000


def statuses(system: System) -> dict[str, JobStatus]:
    records = system.read_topic(system.topics.status)
    values = [r.value() for r in records if r.key() != STATUS_SWITCH_KEY]
    return {s.job_id: s for s in (JobStatus.decode(v) for v in values if v)}


def producer_status(system: System, job_id: str) -> Result:
    args = ["status", system.queue, job_id, "--bootstrap", system.kafka.bootstrap]
    return CliRunner().invoke(producer_cli, args)


def test_the_duration_is_the_handlers_run_time_from_the_worker(system: System) -> None:
    # One handler slot and two leases in hand: the second job is leased while the
    # first runs, so its lease is older than its run by the whole first run.
    system.start(workers=0)
    system.add_worker(system.leasekeeper, concurrency=1, extra=["--prefetch", "2"])
    jobs = system.enqueue_requests(
        [system.task_request(n, sleep_ms=SLEEP_MS) for n in range(2)]
        + [system.task_request(2, fail_attempts=1, permanent=True)]
    )
    wait_until(lambda: set(jobs) <= set(statuses(system)), 60, "three jobs to end")
    found = statuses(system)
    for job_id in jobs[:2]:
        assert found[job_id].duration_s is not None
        assert found[job_id].duration_s >= SLEEP_MS / 1000, found[job_id]
    dead = found[jobs[2]].duration_s
    assert dead is not None and dead > 0  # a failed attempt's run time, too

    starts = {e.job_id: e.at for e in read_log(system.recordings, "starts")}
    runs = {e.job_id: e.at for e in read_log(system.recordings, "runs")}
    earlier, later = sorted(jobs[:2], key=lambda j: starts[j])
    # The later job's lease is at least this old when it ends; its duration is one run.
    lease_age_at_least = runs[later] - starts[earlier]
    assert found[later].duration_s is not None
    assert found[later].duration_s < lease_age_at_least

    answer = producer_status(system, later)
    assert answer.exit_code == 0, answer.output
    shown = re.search(r"ran (\d+\.\d+) s", answer.output)
    assert shown is not None, answer.output
    assert float(shown.group(1)) == round(found[later].duration_s, 3)
    with JobProducer(system.kafka) as producer:
        assert producer.status(system.queue, later).duration_s == found[later].duration_s


def test_status_retention_is_set_at_creation_and_updated_on_request(
    kafka: KafkaSettings, unique: str
) -> None:
    queue = f"ret{unique}"
    topic = QueueTopics(queue=queue).status
    ensure_queue_topics(kafka, queue, partitions=1)
    assert topic_config(kafka, topic)["retention.ms"] == str(STATUS_RETENTION_MS)
    assert STATUS_RETENTION_MS == 7 * 24 * HOUR_MS

    def create_queue(*extra: str) -> Result:
        args = ["create-queue", queue, "--partitions", "1", "--bootstrap", kafka.bootstrap]
        return CliRunner().invoke(producer_cli, [*args, *extra])

    changed = create_queue("--status-retention", "36h")
    assert changed.exit_code == 0, changed.output
    assert topic_config(kafka, topic)["retention.ms"] == str(36 * HOUR_MS)
    ensure_queue_topics(kafka, queue, partitions=1)  # without the option: left alone
    assert topic_config(kafka, topic)["retention.ms"] == str(36 * HOUR_MS)

    fresh = QueueTopics(queue=f"new{unique}").status
    ensure_queue_topics(kafka, f"new{unique}", partitions=1, status_retention_ms=2 * HOUR_MS)
    assert topic_config(kafka, fresh)["retention.ms"] == str(2 * HOUR_MS)

    refused = create_queue("--status-retention", "0s")
    assert refused.exit_code == 2
    assert "--status-retention" in refused.output and "more than 0" in refused.output


def test_with_no_status_nothing_is_written_and_lookups_say_records_are_off(
    system: System, tmp_path: Path
) -> None:
    system.configure(lease_s=30, extra=["--no-status", "--status-retention", "2d"])
    system.start(workers=1, concurrency=4)
    assert topic_config(system.kafka, system.topics.status)["retention.ms"] == str(48 * HOUR_MS)
    [unrecorded] = system.enqueue_tasks(1)
    wait_until(lambda: unrecorded in system.acks(), 60, "the job to succeed")

    answer = producer_status(system, unrecorded)
    assert answer.exit_code == 1, answer.output
    assert f"job {unrecorded}: not found yet" in answer.output
    assert f"status records are off for queue {system.queue} since " in answer.output
    actions = Actions(kafka=system.kafka, prefix="jobs", codec=EnvelopeCodec(SchemaRegistry()))
    now = int(time.time() * 1000)
    shown = dashboard_lookup(actions, FleetState(), [system.queue], unrecorded, now)
    assert shown.state == "not found yet" and shown.note is not None
    assert "status records are off" in shown.note
    index = StatusIndex(system.kafka, "jobs", tmp_path / "index", lambda: [system.queue])
    index.start()
    try:
        wait_until(lambda: index.caught_up(system.queue), 30, "the index to catch up")
        assert index.switched_off(system.queue) is not None
        assert index.get(system.queue, unrecorded) is None
    finally:
        index.stop()

    # Switched back on: the next job gets its record. Records of one topic partition
    # arrive in order, so a record of the first job would be in the topic before it.
    system.leasekeeper.stop()
    system.leasekeeper = system.new_leasekeeper()
    system.leasekeepers.append(system.leasekeeper)
    system.leasekeeper.start().wait_assigned(system.partitions)
    [recorded] = system.enqueue_tasks(1)
    wait_until(lambda: recorded in statuses(system), 60, "the second job's status record")
    assert unrecorded not in statuses(system)
    keys = [r.key() for r in system.read_topic(system.topics.status)]
    assert keys == [STATUS_SWITCH_KEY, STATUS_SWITCH_KEY, recorded.encode()]
    again = producer_status(system, unrecorded)
    assert again.exit_code == 1 and "status records are off" not in again.output
