"""Worker shutdown against real Kafka and a real leasekeeper: SIGTERM mid-load loses nothing.

A worker stopped with SIGTERM finishes (and acks) what it runs and releases
what it has not started, so a second worker completes the queue without
re-running a single job.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest

from jobcore.kafka import KafkaSettings
from producer import JobProducer, JobRequest, ensure_queue_topics
from tests.apps.recording import read_events
from tests.system import Leasekeeper, WorkerProcess, wait_until

pytestmark = pytest.mark.kafka

APP = "tests.apps.recording:app"
JOBS = 400


def _worker(target: str, tmp_path: Path, name: str, recordings: Path) -> WorkerProcess:
    return WorkerProcess(
        app=APP,
        target=target,
        log=tmp_path / f"{name}.log",
        env={"RECORDING_DIR": str(recordings), "RECORDING_MAX_MS": "60"},
        concurrency=8,
    )


def test_sigterm_mid_load_finishes_running_jobs_and_hands_back_the_rest(
    kafka: KafkaSettings, unique: str, tmp_path: Path
) -> None:
    queue = f"wstop{unique}"
    recordings = tmp_path / "recordings"
    recordings.mkdir()
    ensure_queue_topics(kafka, queue, partitions=2)
    leasekeeper = Leasekeeper(
        queue=queue,
        bootstrap=kafka.bootstrap,
        state_dir=tmp_path / "state",
        socket=tmp_path / "lk.sock",
        log=tmp_path / "leasekeeper.log",
    )
    leasekeeper.start().wait_assigned(2)
    first = _worker(leasekeeper.target, tmp_path, "first", recordings).start()
    second: WorkerProcess | None = None
    try:
        with JobProducer(kafka) as producer:
            ids = producer.enqueue_batch(
                JobRequest(queue=queue, type="noop", payload={"n": i}, tenant_id=f"t{i % 3}")
                for i in range(JOBS)
            )

        def runs() -> Counter[str]:
            return Counter(read_events(recordings, "runs"))

        wait_until(lambda: sum(runs().values()) >= 40, 60, "the first worker to get going")
        assert first.process is not None
        first.process.send_signal(signal.SIGTERM)
        assert first.process.wait(60) == 0, (tmp_path / "first.log").read_text()[-3000:]
        done_by_first = set(read_events(recordings, "acks"))
        assert done_by_first, "the first worker acked nothing before it stopped"

        second = _worker(leasekeeper.target, tmp_path, "second", recordings).start()
        wait_until(lambda: set(read_events(recordings, "acks")) >= set(ids), 120, "every job acked")
        counts = runs()
        assert set(counts) == set(ids)
        assert [job for job, n in counts.items() if n != 1] == [], "a job ran twice"
    finally:
        for worker in (first, second):
            if worker is not None:
                worker.stop()
        leasekeeper.stop()
