"""What a kill -9 may re-run, measured from the run itself (duplicates stay bounded).

Duplicates stay bounded by the jobs in flight at a fault plus the acks one
commit interval holds. Each fault is entered here when it happens, with the
figures sampled right before it (leases from the leasekeepers' snapshots, the
acks between two commits from their counters) or read right after it (what a
dead worker started and never saw acked), so the bound a chaos test asserts is
computed from the run, not guessed.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from devtools.localkafka import LocalKafka
from tests.system import Leasekeeper, System, WorkerProcess, wait_until

COMMITS_SAMPLED = 5  # commit intervals averaged into "the acks one interval holds"
SAMPLE_S = 2.0  # longest sampling; the leasekeeper commits every 0.1 s while it makes progress


class FaultKind(StrEnum):
    BROKER = "broker"
    LEASEKEEPER = "leasekeeper"
    WORKER = "worker"
    MOVE_BACK = "move back"  # a clean rebalance: revoked partitions drain, then commit


@dataclass(frozen=True, kw_only=True)
class Fault:
    """One kill -9 and what it may re-run: the jobs it caught in flight, plus the acks
    one commit interval holds when it may move partitions (a worker's death moves none)."""

    kind: FaultKind
    in_flight: int
    commit_acks: int = 0
    at_runs: int = 0

    @property
    def bound(self) -> int:
        return self.in_flight + self.commit_acks

    def __str__(self) -> str:
        return (
            f"{self.kind.value} at {self.at_runs} runs: {self.in_flight} in flight"
            f" + {self.commit_acks} acks per commit"
        )


@dataclass(kw_only=True)
class Ledger:
    """The faults of one run, and the duplicate bound they add up to."""

    faults: list[Fault] = field(default_factory=list)

    def add(self, fault: Fault) -> None:
        self.faults.append(fault)

    @property
    def bound(self) -> int:
        return sum(f.bound for f in self.faults)

    def kinds(self) -> dict[str, int]:
        return dict(Counter(f.kind.value for f in self.faults))


def live_snapshot(leasekeeper: Leasekeeper) -> dict[str, Any]:
    """The snapshot of a leasekeeper that is up (its inspect RPC may lag its start)."""
    found: list[dict[str, Any]] = []

    def answered() -> bool:
        leasekeeper.assert_alive()
        snapshot = leasekeeper.snapshot()
        if snapshot is not None:
            found.append(snapshot)
        return bool(found)

    wait_until(answered, 30, "a leasekeeper snapshot")
    return found[0]


def leases(snapshot: dict[str, Any]) -> int:
    return sum(len(p["leases"]) for p in snapshot["partitions"])


def acks_per_commit(leasekeeper: Leasekeeper) -> int:
    """Acks between two commits of ``leasekeeper`` right now: the progress a crash may
    take with it before the commit metadata carries it (averaged over a few commits).

    A leasekeeper commits only when its progress changed, so an idle one does not
    commit at all: after ``SAMPLE_S`` without enough commits, the acks of that whole
    span count as one interval (more than an interval holds, never less).
    """
    before = live_snapshot(leasekeeper)
    after: list[dict[str, Any]] = []
    deadline = time.monotonic() + SAMPLE_S

    def sampled() -> bool:
        after[:] = [live_snapshot(leasekeeper)]
        commits = int(after[0]["commits"]) - int(before["commits"])
        return commits >= COMMITS_SAMPLED or time.monotonic() >= deadline

    wait_until(sampled, SAMPLE_S + 30, f"{COMMITS_SAMPLED} commits", step=0.1)
    commits = int(after[0]["commits"]) - int(before["commits"])
    acked = int(after[0]["counters"]["acked"]) - int(before["counters"]["acked"])
    return math.ceil(acked / max(commits, 1))


def leasekeeper_fault(leasekeeper: Leasekeeper, at_runs: int) -> Fault:
    """Sample, then kill -9 ``leasekeeper``: its leases and one commit interval of acks."""
    commit_acks = acks_per_commit(leasekeeper)
    in_flight = leases(live_snapshot(leasekeeper))
    leasekeeper.kill()
    return Fault(
        kind=FaultKind.LEASEKEEPER, in_flight=in_flight, commit_acks=commit_acks, at_runs=at_runs
    )


def move_back_fault(holder: Leasekeeper, at_runs: int) -> Fault:
    """Sample ``holder`` before a member rejoins and takes partitions from it: a clean
    revoke drains the moving jobs within the grace and commits, so at most its leases
    run again (no commit interval: the revoke ends with a commit)."""
    return Fault(kind=FaultKind.MOVE_BACK, in_flight=leases(live_snapshot(holder)), at_runs=at_runs)


def worker_fault(system: System, worker: WorkerProcess, at_runs: int) -> Fault:
    """Kill -9 ``worker``; afterwards its recordings are final: what it started and never
    saw acked was in flight (run or not, the leasekeeper hands it out again)."""
    worker.kill()
    assert worker.process is not None
    pid = worker.process.pid
    started = {e.job_id for e in system.starts() if e.pid == pid}
    acked = {e.job_id for e in system.ack_events() if e.pid == pid}
    return Fault(kind=FaultKind.WORKER, in_flight=len(started - acked), at_runs=at_runs)


def extra_starts(system: System) -> int:
    """Starts beyond each job's first: every re-run, finished or cut short."""
    return sum(n - 1 for n in Counter(e.job_id for e in system.starts()).values())


def twice_started(system: System) -> list[tuple[str, list[tuple[int, int]]]]:
    """Jobs started more than once, with (attempt, pid) of each start: the evidence."""
    starts: dict[str, list[tuple[int, int]]] = {}
    for event in sorted(system.starts(), key=lambda e: e.at):
        starts.setdefault(event.job_id, []).append((event.attempt, event.pid))
    return [(job, runs) for job, runs in starts.items() if len(runs) > 1]


def broker_fault(
    cluster: LocalKafka,
    index: int,
    leasekeepers: list[Leasekeeper],
    at_runs: int,
    max_uncommitted: int,
) -> Fault:
    """Sample, then kill -9 broker ``index``: a lost coordinator or leader may move any
    partition, so every leasekeeper's leases and commit interval count. No commit lands
    until another broker coordinates the group, so the commit interval stretches: each
    leasekeeper stops leasing at ``max_uncommitted`` finished jobs in no commit."""
    sampled = sum(acks_per_commit(lk) for lk in leasekeepers)
    commit_acks = max(sampled, max_uncommitted * len(leasekeepers))
    in_flight = sum(leases(live_snapshot(lk)) for lk in leasekeepers)
    cluster.kill_broker(index)
    return Fault(
        kind=FaultKind.BROKER, in_flight=in_flight, commit_acks=commit_acks, at_runs=at_runs
    )
