"""Job progress against real Kafka and real processes: a handler reports how far it has
got and waits for the test's go-ahead; ``leasekeeper inspect job`` shows the value
while the job runs and the status record keeps the last one once it ends. A worker
killed mid-job takes its progress with its lease: the retry starts without it, and
the other worker's job keeps its own."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from leasekeeper.views.inspect_view import fetch_snapshot
from producer import JobProducer, JobRequest
from schemas.codec import SchemaRegistry
from tests.apps.recording import SCHEMAS
from tests.system import BIN, System, WorkerProcess, wait_until

pytestmark = pytest.mark.kafka

# The handler reports, then opens its job's FIFO: the open blocks until the test opens
# the other end, the read until the test closes it (the go-ahead).
APP_SOURCE = """
import os
from pathlib import Path

from workers import App

app = App("progressing")


@app.job("task")
def task(ctx, payload):
    ctx.progress(0.4, f"rendered 800 of 2,000 pages (attempt {ctx.attempt})")
    gate = Path(os.environ["PROGRESS_GATES"]) / f"gate-{payload['n']}"
    with gate.open() as fifo:
        fifo.read()


@app.job("render")
def render(ctx, payload):
    ctx.progress(0.5, "half way")
    ctx.progress(1.0, f"all {payload['pages']} pages")  # within a second: no beat takes it
"""

FAST_RETRIES = ["--retry-base", "0.2", "--retry-tiers", "1s,2s,5s", "--retry-budget", "1.0"]


def _worker(system: System, apps: Path) -> WorkerProcess:
    path = os.pathsep.join(p for p in (str(apps), os.environ.get("PYTHONPATH", "")) if p)
    worker = WorkerProcess(
        app="progressjobs:app",
        target=system.leasekeeper.target,
        log=system.tmp / f"worker-{len(system.workers)}.log",
        env={"PYTHONPATH": path, "PROGRESS_GATES": str(apps)},
        concurrency=1,
        extra_args=["--schema-path", str(SCHEMAS), "--prefetch", "1", "--grace", "1"],
    )
    system.workers.append(worker.start())
    return worker


def _view(system: System, job_id: str) -> dict[str, object]:
    return fetch_snapshot(system.leasekeeper.target, None, job_id=job_id, timeout=5)


def _running(system: System, job_id: str, attempt: int) -> dict[str, object]:
    """The leasekeeper's view of the job once its handler's progress reached it."""
    said = f"rendered 800 of 2,000 pages (attempt {attempt})"
    wait_until(
        lambda: _view(system, job_id).get("progress_message") == said,
        30,
        f"attempt {attempt} of {job_id} to report progress",
        describe=lambda: _view(system, job_id),
    )
    return _view(system, job_id)


def _release(gate: Path) -> bool:
    """The go-ahead, once the handler waits at its gate (False until then)."""
    try:
        end = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # no reader yet
            return False
        raise
    os.close(end)
    return True


def test_progress_is_shown_while_the_job_runs_kept_when_it_ends_and_dropped_with_a_dead_worker(
    system: System, tmp_path: Path
) -> None:
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "progressjobs.py").write_text(APP_SOURCE)
    for n in (1, 2):
        os.mkfifo(apps / f"gate-{n}")
    system.configure(lease_s=3.0, extra=FAST_RETRIES)
    system.start(workers=0)
    victim = _worker(system, apps)
    (doomed,) = system.enqueue_requests([system.task_request(1)])

    seen = _running(system, doomed, attempt=1)
    assert (seen["state"], seen["attempt"], seen["progress"]) == ("leased", 1, 0.4)
    shown = subprocess.run(
        [str(BIN / "leasekeeper"), "inspect", "job", doomed, "--target", system.leasekeeper.target],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "  progress: 40% rendered 800 of 2,000 pages (attempt 1)" in shown.stdout, shown

    # A second worker's job runs beside it; then the first worker dies mid-job.
    _worker(system, apps)
    (kept,) = system.enqueue_requests([system.task_request(2)])
    _running(system, kept, attempt=1)
    victim.kill()
    wait_until(
        lambda: _view(system, doomed)["state"] != "leased", 30, "the dead worker's lease to end"
    )
    assert "progress" not in _view(system, doomed), "dropped with the lease"
    assert _view(system, kept)["progress"] == 0.4, "the live worker's job keeps its own"

    producer = JobProducer(system.kafka, registry=SchemaRegistry(extra_dirs=[SCHEMAS]))
    try:
        wait_until(lambda: _release(apps / "gate-2"), 30, "job 2's handler at its gate")
        wait_until(lambda: producer.status(system.queue, kept).finished, 60, "job 2 to end")
        finished = producer.status(system.queue, kept)
        assert (finished.state.value, finished.progress_text) == (
            "succeeded",
            "40% rendered 800 of 2,000 pages (attempt 1)",
        )
        assert "progress 40% rendered" in finished.lines(str)[0]

        # The retry runs on the live worker and reports afresh; its value is the one kept.
        _running(system, doomed, attempt=2)
        wait_until(lambda: _release(apps / "gate-1"), 30, "job 1's retry at its gate")
        wait_until(lambda: producer.status(system.queue, doomed).finished, 60, "job 1 to end")
        retried = producer.status(system.queue, doomed)
        assert (retried.state.value, retried.attempt, retried.progress_message) == (
            "succeeded",
            2,
            "rendered 800 of 2,000 pages (attempt 2)",
        )
    finally:
        producer.close()


def test_progress_reported_in_the_last_second_is_kept_with_the_job_s_status(
    system: System, tmp_path: Path
) -> None:
    """Heartbeats carry progress at most once a second; what a handler says after the
    last one comes with its settlement, so the status record keeps its final value."""
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "progressjobs.py").write_text(APP_SOURCE)
    system.start(workers=0)
    _worker(system, apps)
    producer = JobProducer(system.kafka, registry=SchemaRegistry(extra_dirs=[SCHEMAS]))
    try:
        job_id = producer.enqueue(JobRequest(queue=system.queue, type="render", tenant_id="t",
                                             payload={"pages": 3}))  # fmt: skip
        wait_until(lambda: producer.status(system.queue, job_id).finished, 60, "the job to end")
        done = producer.status(system.queue, job_id)
        assert (done.state.value, done.progress_text) == ("succeeded", "100% all 3 pages")
    finally:
        producer.close()
