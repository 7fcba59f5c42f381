"""Progress in every reader's answer: the status record (old records still read), the
shared report, ``producer status`` (the status topic and ``--dashboard``), the
dashboard's lookup, Job page and leases table, and ``inspect job``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jobcore.control import JobEnd, JobStatus
from jobcore.job_state import JobState, from_answer, from_inspect, from_status
from jobcore.plain import plain
from jobcore.progress import JobProgress
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.dashboard import job_lookup
from leasekeeper.dashboard.fleet_view import FleetState
from leasekeeper.dashboard.pages import leasekeepers_page
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.views.finished import status_view
from leasekeeper.views.fleet import fleet_record
from leasekeeper.views.inspect_view import job_lines
from producer.lookup import JobLookup
from schemas.job import Job

SAID = JobProgress(0.4, 'rendered 800 of 2,000 "pages" \u2713')
DONE = JobStatus(job_id="job-5", state=JobEnd.SUCCEEDED, at_ms=7, attempt=1, worker="w-1",
                 progress=SAID)  # fmt: skip


def test_a_status_record_keeps_the_progress_and_old_records_read_as_before() -> None:
    record = json.loads(DONE.encode())
    assert (record["progress"], record["progress_message"]) == (0.4, SAID.message)
    assert JobStatus.decode(DONE.encode()) == DONE
    # A record from before progress, and one whose value is not usable.
    old = b'{"v":1,"job_id":"a","state":"succeeded","at":1,"attempt":1,"reason":""}'
    assert JobStatus.decode(old).progress is None
    bad = old[:-1] + b',"progress":"40%","progress_message":7}'
    assert JobStatus.decode(bad).progress is None
    bare = JobStatus(job_id="a", state=JobEnd.SUCCEEDED, at_ms=1, attempt=1,
                     progress=JobProgress(1.0))  # fmt: skip
    assert b"progress_message" not in bare.encode()
    assert JobStatus.decode(bare.encode()).progress == JobProgress(1.0)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (SAID, '40% rendered 800 of 2,000 "pages" \u2713'),
        (JobProgress(0.999), "99.9%"),
        (JobProgress(0.9999), "99.9%"),  # never 100% before it is
        (JobProgress(1.0), "100%"),
        (JobProgress(0.0, "starting"), "0% starting"),
    ],
)
def test_progress_reads_as_a_floored_percent_and_its_message(
    value: JobProgress, shown: str
) -> None:
    assert value.text() == shown


def test_a_finished_job_shows_its_last_progress_in_every_reader() -> None:
    report = from_status(DONE, source="status topic")
    assert (report.progress, report.progress_message) == (0.4, SAID.message)
    (line,) = JobLookup(**vars(report)).lines(str)
    assert f"progress {SAID.text()}" in line
    view = status_view(DONE)  # inspect job, from the status topic
    assert from_inspect(view, source="inspect").progress_text == SAID.text()
    assert f"  progress: {SAID.text()}" in job_lines(view, 0)
    assert not any("progress_message" in shown for shown in job_lines(view, 0))
    page = job_lookup.job_page("", "job-5", job_lookup.JobWhere(**vars(report)))
    assert "<td>progress</td><td>40% rendered 800 of 2,000 &quot;pages&quot;" in page


def test_a_leased_job_s_progress_reaches_the_dashboard_and_producer_status(
    tmp_path: Path,
) -> None:
    now = 1_800_000_000.0
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(lease_s=10),
                         clock=lambda: now, monotonic=lambda: now)  # fmt: skip
    tp = TopicPart("jobs.q", 0)
    engine.partitions.assign(tp, 5)
    for offset in (5, 6):
        job = Job(job_id=f"job-{offset}", queue="q", tenant_id="t1", type="render",
                  payload=b"", created_at_ms=0)  # fmt: skip
        engine.fetch.offer(tp, offset, job, b"x")
    grant, quiet = engine.workers.claim("w-1", 2, wait_s=0)
    engine.workers.heartbeat([(grant.lease_id, grant.token)], progress={grant.lease_id: SAID})

    # inspect job, from the leasekeeper's own view
    held = engine.views.job_view("job-5")
    assert from_inspect(held, source="inspect").progress == 0.4
    assert f"  progress: {SAID.text()}" in job_lines(held, 0)

    # the dashboard, from the snapshot the leasekeeper publishes
    snapshot = {
        "queue": "q",
        "partitions": [plain(p) for p in engine.views.snapshot().partitions],
    }
    fleet = FleetState()
    at_ms = int(now * 1000)
    fleet.apply("q@lk-1", json.dumps(fleet_record(snapshot, instance="lk-1", now_ms=at_ms,
                                                  max_leases=10)).encode())  # fmt: skip
    actions: Any = None  # a leased job is found in the snapshots, before any status topic
    found = job_lookup.lookup(actions, fleet, ["q"], "job-5", at_ms)
    assert (found.state, found.progress_text) == (JobState.LEASED, SAID.text())
    assert "<td>progress</td><td>40% rendered" in job_lookup.job_page("", "job-5", found)
    silent = job_lookup.lookup(actions, fleet, ["q"], quiet.job.job_id if quiet.job else "", at_ms)
    assert silent.state is JobState.LEASED and silent.progress is None
    assert "<td>40% rendered 800 of 2,000 &quot;pages&quot; \u2713</td>" in leasekeepers_page(
        fleet, at_ms
    )

    # producer status --dashboard: the dashboard's /api/job answer, read back
    answer = json.loads(json.dumps(plain(found)))
    report = from_answer(answer, source="dashboard")
    (line,) = JobLookup(**vars(report)).lines(str)
    assert line.startswith("job job-5: leased") and f"progress {SAID.text()}" in line
