"""The fake and the real system agree: the same jobs, run by the same handlers, end the
same way in a ``MemoryQueue`` (in-process, fake clock) and on a real broker with a
real leasekeeper and worker process: a job that fails twice then succeeds, a
permanent failure (dead-lettered), a delayed job, and a delayed job cancelled before
it is due. Compared: how each ended (state, attempts, reason) and which attempts of
its handler started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobcore.control import STATUS_SWITCH_KEY, CancelledHow, JobStatus
from jobtesting import MemoryQueue
from producer import JobProducer
from schemas.codec import SchemaRegistry
from tests.apps.recording import SCHEMAS, app, read_log
from tests.system import System, wait_until

pytestmark = pytest.mark.kafka

# name → (task payload, enqueue options, cancelled before it is due)
SCENARIOS: dict[str, tuple[dict[str, Any], dict[str, Any], bool]] = {
    "fails twice, then succeeds": ({"fail_attempts": 2}, {}, False),
    "permanent failure": ({"fail_attempts": 1, "permanent": True}, {}, False),
    "delayed": ({}, {"delay": 2.0}, False),
    "delayed, cancelled before due": ({}, {"delay": 5.0}, True),
}

Outcome = tuple[str, int, str, tuple[int, ...]]  # state, attempts, reason, attempts started


def _enqueue(producer: JobProducer, queue: str) -> dict[str, str]:
    """Every scenario's job; returns job id → scenario."""
    names = {}
    for n, (name, (task, options, cancel)) in enumerate(SCENARIOS.items()):
        job_id = producer.enqueue(queue, "task", {"n": n, **task}, tenant_id=f"t{n}", **options)
        if cancel:
            producer.record_cancellation(queue, job_id, reason="no longer wanted")
        names[job_id] = name
    return names


def _started(recordings: Path, names: dict[str, str]) -> dict[str, tuple[int, ...]]:
    found: dict[str, list[int]] = {name: [] for name in names.values()}
    for event in read_log(recordings, "starts"):
        found[names[event.job_id]].append(event.attempt)
    return {name: tuple(sorted(attempts)) for name, attempts in found.items()}


def _in_memory(recordings: Path) -> dict[str, Outcome]:
    with MemoryQueue(schema_dirs=[SCHEMAS]) as queue:
        names = _enqueue(queue.producer(), "parity")
        report = queue.drain(app, "parity")
    started = _started(recordings, names)
    return {names[run.job_id]: (run.state.value, run.attempts, run.reason,
                                started[names[run.job_id]]) for run in report}  # fmt: skip


def _on_kafka(system: System) -> dict[str, Outcome]:
    system.start(workers=1, concurrency=4)
    with JobProducer(system.kafka, registry=SchemaRegistry(extra_dirs=[SCHEMAS])) as producer:
        names = _enqueue(producer, system.queue)
    ended: dict[str, JobStatus] = {}

    def all_ended() -> bool:
        for message in system.read_topic(system.topics.status):
            value = message.value()
            if value and message.key() != STATUS_SWITCH_KEY:
                status = JobStatus.decode(value)
                ended[status.job_id] = status
        return set(names) <= set(ended)

    wait_until(all_ended, 50, "every job's status record", describe=lambda: ended)
    started = _started(system.recordings, names)
    return {name: (ended[job_id].state.value, ended[job_id].attempt, ended[job_id].reason,
                   started[name]) for job_id, name in names.items()}  # fmt: skip


def test_the_memory_queue_and_a_real_broker_agree(
    system: System, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory_recordings = tmp_path / "memory-recordings"
    memory_recordings.mkdir()
    monkeypatch.setenv("RECORDING_DIR", str(memory_recordings))
    in_memory = _in_memory(memory_recordings)
    assert in_memory == {
        "fails twice, then succeeds": ("succeeded", 3, "", (1, 2, 3)),
        "permanent failure": ("dead", 1, "permanent error", (1,)),
        "delayed": ("succeeded", 1, "", (1,)),
        "delayed, cancelled before due": ("cancelled", 0, CancelledHow.WAITING.value, ()),
    }
    assert _on_kafka(system) == in_memory
