"""One answer to "where is my job?": for a delayed, a skipped, a leased and a finished
job, ``JobProducer.status()`` (the status topic, and the dashboard), the dashboard's
``/api/job`` and ``leasekeeper inspect job`` give the same state wherever each can
know it, and say which source to ask where they cannot; the Job page shows the
leased job itself."""

from __future__ import annotations

import html
import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import replace

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.job_state import (
    DASHBOARD_KNOWS,
    STATUS_TOPIC_KNOWS,
    JobReport,
    JobState,
    from_answer,
    from_inspect,
)
from producer import JobProducer
from schemas.codec import SchemaRegistry
from tests.apps.recording import SCHEMAS
from tests.dashboards import get, served
from tests.system import BIN, System, wait_until

pytestmark = pytest.mark.kafka
TIERS = DelayTiers.parse("1s,2s,5s")


@pytest.fixture
def dashboard(system: System) -> Iterator[str]:
    with served(system) as url:
        yield url


def from_api(url: str, system: System, job_id: str) -> JobReport:
    query = urllib.parse.urlencode({"id": job_id, "queue": system.queue})
    return from_answer(json.loads(get(f"{url}/api/job?{query}")), source="api")


def from_leasekeeper(system: System, job_id: str) -> JobReport:
    env = {**os.environ, "KAFKA_BOOTSTRAP": system.kafka.bootstrap}
    done = subprocess.run(
        [str(BIN / "leasekeeper"), "inspect", "job", job_id, "--json",
         "--target", system.leasekeeper.target, "--queue", system.queue],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return from_inspect(json.loads(done.stdout), source="inspect")


def facts(report: JobReport) -> tuple[object, ...]:
    """What every source that knows the state must agree on."""
    return (report.state, report.worker, report.attempt, report.duplicate_of)


def test_every_reader_gives_the_same_state_where_it_can_know_it(
    system: System, dashboard: str
) -> None:
    system.configure(lease_s=30, extra=["--retry-tiers", ",".join(TIERS.names)])
    system.start(workers=1, concurrency=4)
    keyed = replace(system.task_request(0), dedupe_key="invoice-7")
    done, first, long = system.enqueue_requests(
        [system.task_request(1), keyed, system.task_request(2, sleep_ms=30_000)]
    )
    registry = SchemaRegistry(extra_dirs=[SCHEMAS])
    producer = JobProducer(system.kafka, registry=registry, tiers=TIERS)
    try:
        [later] = producer.enqueue_batch([replace(system.task_request(3), delay=120.0)])
        wait_until(lambda: producer.status(system.queue, first).finished, 60, "the first to end")
        [skipped] = system.enqueue_requests([replace(keyed, payload={"n": 9})])

        def status(job_id: str, **where: str) -> JobReport:
            return producer.status(system.queue, job_id, **where)

        wait_until(lambda: status(skipped).finished, 60, "the duplicate's status record")
        wait_until(lambda: status(done).finished, 60, "the short job to end")
        wait_until(
            lambda: status(long, dashboard=dashboard).state is JobState.LEASED,
            60,
            "the dashboard to see the lease",
        )

        # A finished job: every source knows it, by whole id; inspect by a prefix too.
        ended = [
            status(done),
            status(done, dashboard=dashboard),
            from_api(dashboard, system, done),
            from_leasekeeper(system, done),
            from_leasekeeper(system, done[:8]),
        ]
        assert {facts(r) for r in ended} == {facts(ended[0])}, ended
        assert ended[0].state is JobState.SUCCEEDED and ended[0].worker
        # Its status record names the record it ran from: the Job page shows the job.
        done_page = html.unescape(get(f"{dashboard}/job?{urllib.parse.urlencode({'id': done})}"))
        shown = ("<td>task</td>", "<td>tenant-0</td>")
        assert all(fact in done_page for fact in shown), done_page

        # A skipped duplicate: its status record tells every source of which job.
        skips = [
            status(skipped),
            status(skipped, dashboard=dashboard),
            from_api(dashboard, system, skipped),
            from_leasekeeper(system, skipped),
        ]
        assert {(r.state, r.duplicate_of) for r in skips} == {(JobState.SKIPPED, first)}, skips

        # A leased job: the status topic cannot know it, and says who can.
        leased = [
            status(long, dashboard=dashboard),
            from_api(dashboard, system, long),
            from_leasekeeper(system, long),
        ]
        assert {facts(r) for r in leased} == {facts(leased[0])}, leased
        assert leased[0].state is JobState.LEASED and leased[0].attempt == 1
        page = html.unescape(get(f"{dashboard}/job?{urllib.parse.urlencode({'id': long})}"))
        job_facts = ("<td>task</td>", "<td>tenant-0</td>", "one</td><td>0<", '"sleep_ms": 30000')
        assert all(shown in page for shown in job_facts), page
        assert "enqueued</td><td>20" in page  # an ISO time
        unknown = status(long)
        assert (unknown.state, unknown.note) == (JobState.NOT_FOUND, STATUS_TOPIC_KNOWS)

        # A delayed job: only its leasekeeper knows it (until when); the others say so.
        wait_until(
            lambda: from_leasekeeper(system, later).state is JobState.DELAYED,
            60,
            "the leasekeeper to hold the delayed job",
        )
        delayed = from_leasekeeper(system, later)
        assert delayed.until_ms is not None and delayed.until_ms > time.time() * 1000
        assert status(later).note == STATUS_TOPIC_KNOWS
        assert status(later, dashboard=dashboard).note == DASHBOARD_KNOWS
        blind = from_api(dashboard, system, later)
        assert (blind.state, blind.note) == (JobState.NOT_FOUND, DASHBOARD_KNOWS)
        assert status(later).state is JobState.NOT_FOUND
    finally:
        producer.close()
        # The long job would hold both the worker's and the leasekeeper's shutdown.
        for process in [*system.workers, system.leasekeeper]:
            process.kill()
