"""Scenario 6: ``kill -9`` of one worker, then of the leasekeeper, with 32 slots of 100 ms jobs.

The worker app writes a line per handler start and per confirmed ack
(``benchmarks.apps.recovery_app``), straight to the kernel, so the lines
survive the kill. From them: which jobs the crash affected (started and not
acked), when each was running again (or, after a leasekeeper crash, acked by
the worker that kept running it), how many ran twice, and whether any job
never finished (lost; must be 0).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from benchmarks import procs
from benchmarks.context import BenchContext
from benchmarks.load import Preloader
from benchmarks.ours import OurSystem
from benchmarks.scenarios import result
from jobcore.control import JobEnd, JobStatus
from jobcore.kafka import KafkaSettings, make_consumer
from jobcore.topics import QueueTopics

JOB_S = 0.1
# Jobs arrive at 60% of what 32 slots can run, so the queue stays short even with
# one worker dead: the recovery time measured is the system's, not a backlog's.
FEED_SHARE = 0.6


class Feeder(threading.Thread):
    """Enqueues the steady stream in the background while the kills happen."""

    def __init__(self, loader: Preloader, rate: float, seconds: float) -> None:
        super().__init__(daemon=True)
        self.loader, self.rate, self.seconds = loader, rate, seconds
        self.ids: list[str] = []

    def run(self) -> None:
        self.ids = self.loader.paced(self.rate, self.seconds)


@dataclass(frozen=True)
class Event:
    kind: str
    job: str
    attempt: int
    pid: int
    at: float


def read_events(directory: Path) -> list[Event]:
    events = []
    for path in directory.glob("*.events"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 5:
                kind, job, attempt, pid, at = parts
                events.append(Event(kind, job, int(attempt), int(pid), float(at)))
    return sorted(events, key=lambda e: e.at)


def affected_by(events: list[Event], killed_at: float, pid: int | None) -> set[str]:
    """Jobs started before the kill (by ``pid``, or by anyone) and not acked before it."""
    before = [e for e in events if e.at < killed_at]
    started = {e.job for e in before if e.kind == "start" and (pid is None or e.pid == pid)}
    acked = {e.job for e in before if e.kind == "ack"}
    return started - acked


def recovery_seconds(
    events: list[Event], jobs: set[str], killed_at: float, dead: int | None
) -> float | None:
    """Until the last affected job started again (elsewhere) or was acked after the kill."""
    resolved: dict[str, float] = {}
    for e in events:
        if e.at < killed_at or e.job not in jobs or e.job in resolved:
            continue
        if (e.kind == "start" and e.pid != dead) or (e.kind == "ack" and dead is None):
            resolved[e.job] = e.at
    if len(resolved) < len(jobs):
        return None
    return round(max(resolved.values(), default=killed_at) - killed_at, 3)


def succeeded_per_status(settings: KafkaSettings, queue: str, wanted: set[str]) -> set[str]:
    """The jobs of ``wanted`` whose status record says they succeeded.

    A worker killed right after its leasekeeper took an ack, before the worker's
    ``on_settled`` callback wrote the "ack" event, leaves a job acked with no event
    (one run had four). The leasekeeper's status record is the witness then."""
    topic = QueueTopics(queue=queue).status
    consumer = make_consumer(settings, f"bench-status-{time.monotonic_ns()}")
    found: set[str] = set()
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, low)])
        read = 0
        while read < high - low:
            messages = consumer.consume(num_messages=500, timeout=1.0)
            if not messages:
                break
            for message in messages:
                read += 1
                value, key = message.value(), message.key()
                if message.error() is not None or not value or key is None:
                    continue
                if key.decode(errors="replace") not in wanted:
                    continue
                status = JobStatus.decode(value)
                if status.state is JobEnd.SUCCEEDED:
                    found.add(status.job_id)
    finally:
        consumer.close()
    return found


def _row(
    variant: str,
    events: list[Event],
    killed_at: float,
    dead: int | None,
    note: str,
    acked: frozenset[str] | set[str] = frozenset(),
) -> dict[str, Any]:
    """``acked``: jobs known acked without an "ack" event (``succeeded_per_status``)."""
    jobs = affected_by(events, killed_at, dead) - acked
    after = [e.at for e in events if e.kind == "start" and e.at > killed_at]
    starts = Counter(e.job for e in events if e.kind == "start" and e.job in jobs)
    return {
        "system": "ours",
        "variant": variant,
        "affected_jobs": len(jobs),
        "affected_ran_twice": sum(1 for n in starts.values() if n > 1),
        "recovery_s": recovery_seconds(events, jobs, killed_at, dead),
        "first_start_after_kill_s": round(min(after) - killed_at, 3) if after else None,
        "note": note,
    }


def run(ctx: BenchContext) -> dict[str, Any]:
    config = ctx.config
    slots = config.recovery_slots
    per_process = slots // config.processes
    seconds = 5 * config.recovery_phase_s + config.recovery_lease_s
    rate = FEED_SHARE * slots / JOB_S
    loader = ctx.preloader("recovery")
    feeder = Feeder(loader, rate, seconds)
    system = OurSystem(
        ctx.settings,
        loader.queue,
        ctx.fresh_dir("recovery"),
        partitions=config.partitions,
        lease_s=config.recovery_lease_s,
    )
    directory = system.progress_dir
    try:
        system.start_leasekeeper()
        system.start_workers("recovery_app", config.processes, per_process)
        feeder.start()
        procs.wait_until(lambda: len(read_events(directory)) > slots, 60, "jobs to run")
        time.sleep(config.recovery_phase_s)

        victim = system.workers[0]
        worker_killed_at = time.time()
        procs.kill(victim)
        time.sleep(config.recovery_lease_s + 2 * config.recovery_phase_s)

        assert system.leasekeeper is not None
        lk_killed_at = time.time()
        procs.kill(system.leasekeeper)
        system.start_leasekeeper()  # same state dir, same static member id

        feeder.join()
        ids = set(feeder.ids)

        by_status: set[str] = set()
        checked_at = [0.0]

        def all_acked() -> bool:
            missing = ids - {e.job for e in read_events(directory) if e.kind == "ack"} - by_status
            if missing and len(missing) <= 100 and time.monotonic() - checked_at[0] > 5:
                checked_at[0] = time.monotonic()
                by_status.update(succeeded_per_status(ctx.settings, loader.queue, missing))
                missing -= by_status
            return not missing

        procs.wait_until(all_acked, 240, "every job to be acked", step=0.25)
        events = read_events(directory)
    finally:
        system.stop()
    starts = Counter(e.job for e in events if e.kind == "start")
    by_event = {e.job for e in events if e.kind == "ack"}
    by_status -= by_event  # only the acks whose event never came
    acked = by_event | by_status
    rows = [
        _row("kill -9 one worker", events, worker_killed_at, victim.pid,
             f"its leases expire after --lease {config.recovery_lease_s:g}s", by_status),
        _row("kill -9 the leasekeeper, restart", events, lk_killed_at, None,
             "restarted at once on the same state dir", by_status),
    ]  # fmt: skip
    for row in rows:
        row["duplicates"] = sum(n - 1 for n in starts.values())  # the whole run
        row["lost"] = len(ids - acked)
        row["jobs"] = len(ids)
        row["acked_per_status_record"] = len(by_status)
    return result(
        "recovery",
        "Recovery after kill -9",
        {
            "slots": f"{config.processes} workers x {per_process}",
            "job_ms": int(JOB_S * 1000),
            "lease_s": config.recovery_lease_s,
            "jobs": len(ids),
            "feed_rate": round(rate),
            "duplicates_and_lost": "counted over the whole run (both kills)",
        },
        rows,
    )
