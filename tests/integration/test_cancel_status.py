"""``producer cancel`` says which case applied, from the status records a real
leasekeeper writes to ``jobs.Q.status``: cancelled while waiting, lease ended
while running, not cancelled because the job already succeeded or died, and not
found yet. Each case has its documented exit code.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from dataclasses import replace

from click.testing import CliRunner, Result

from jobcore.control import JobEnd, JobStatus
from jobcore.delay_tiers import DelayTiers
from producer import JobProducer
from producer.cli import main as producer_cli
from schemas.codec import SchemaRegistry
from tests.apps.recording import SCHEMAS
from tests.system import BIN, System, wait_until

TIERS = DelayTiers.parse("1s,2s,5s")


def cancel(system: System, job_id: str, *, wait_s: float = 30) -> Result:
    args = ["cancel", system.queue, job_id, "--wait", str(wait_s)]
    return CliRunner().invoke(producer_cli, [*args, "--bootstrap", system.kafka.bootstrap])


def statuses(system: System) -> dict[str, JobStatus]:
    records = system.read_topic(system.topics.status)
    return {s.job_id: s for s in (JobStatus.decode(r.value()) for r in records if r.value())}


def test_cancel_answers_which_case_applied(system: System) -> None:
    system.configure(lease_s=6, extra=["--retry-tiers", ",".join(TIERS.names)])
    system.start(workers=1, concurrency=4)
    done, dies, long = system.enqueue_requests([
        system.task_request(0),
        system.task_request(1, fail_attempts=1, permanent=True),
        system.task_request(2, sleep_ms=20_000),
    ])  # fmt: skip
    registry = SchemaRegistry(extra_dirs=[SCHEMAS])
    with JobProducer(system.kafka, registry=registry, tiers=TIERS) as producer:
        [later] = producer.enqueue_batch([replace(system.task_request(3), delay=120.0)])

    wait_until(lambda: {done, dies} <= set(statuses(system)), 60, "two jobs to end")
    assert statuses(system)[done].state is JobEnd.SUCCEEDED
    assert statuses(system)[dies].state is JobEnd.DEAD
    succeeded = cancel(system, done)
    assert succeeded.exit_code == 5, succeeded.output
    assert succeeded.output.startswith(f"not cancelled: job {done} already succeeded at ")
    dead = cancel(system, dies)
    assert dead.exit_code == 5, dead.output
    assert "already died (permanent error) at " in dead.output

    waiting = cancel(system, later)
    assert waiting.exit_code == 0, waiting.output
    assert waiting.output.startswith(f"cancelled {later} while it waited")

    wait_until(lambda: long in {e.job_id for e in system.starts()}, 60, "the long job to start")
    running = cancel(system, long)
    assert running.exit_code == 4, running.output
    assert running.output.startswith(f"cancelled {long} while it ran (attempt 1)")

    never = cancel(system, uuid.uuid4().hex, wait_s=1)
    assert never.exit_code == 6, never.output
    assert "not found yet: cancellation recorded" in never.output


def inspect_job(system: System, job_id: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KAFKA_BOOTSTRAP": system.kafka.bootstrap, "COLUMNS": "80"}
    return subprocess.run(
        [str(BIN / "leasekeeper"), "inspect", "job", job_id,
         "--target", system.leasekeeper.target],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


def test_inspect_job_finds_finished_and_skipped_jobs_and_refuses_unknown_ids(
    system: System,
) -> None:
    system.start(workers=1, concurrency=4)
    keyed = replace(system.task_request(0), dedupe_key="invoice-42")
    [first] = system.enqueue_requests([keyed])
    wait_until(lambda: first in statuses(system), 60, "the first job to succeed")
    [second] = system.enqueue_requests([replace(keyed, payload={"n": 1})])

    def skipped() -> bool:
        return inspect_job(system, second[:10]).returncode == 0

    wait_until(skipped, 60, "the duplicate to be skipped")
    shown = inspect_job(system, second[:10])
    assert shown.stdout.splitlines()[0] == f"job {second}: skipped: duplicate of {first}"

    finished = inspect_job(system, first)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.splitlines()[0] == f"job {first}: succeeded"
    assert "  ended_at: " in finished.stdout and " ago)" in finished.stdout
    with JobProducer(system.kafka) as producer:  # the API records, whatever the job did
        producer.record_cancellation(system.queue, first)

    def recorded() -> bool:
        return "cancellation_recorded_at" in inspect_job(system, first).stdout

    wait_until(recorded, 30, "the late cancellation to reach the leasekeeper")
    late = inspect_job(system, first)
    assert late.stdout.splitlines()[0] == f"job {first}: succeeded", late.stdout

    unknown = inspect_job(system, uuid.uuid4().hex)
    assert unknown.returncode == 1, unknown.stdout
    assert unknown.stdout.split(": ")[1].startswith("unknown")
    assert "Traceback" not in unknown.stderr
