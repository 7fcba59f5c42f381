"""The workers' port: claim, heartbeat and settle (the RPC front), and what the loop
does for workers that vanished (expired leases) or never came (unhandled types).

A claim long-polls under the engine's lock on a condition of its own
(``Claimers``); a gate may hide ready jobs from it for a while (a rate limit), and
then it sleeps until the gate lets one go instead of spinning.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

from jobcore.progress import JobProgress
from jobcore.topics import DEFAULT_CLASS
from leasekeeper.core.claimer import Claimers
from leasekeeper.core.clocks import now_ms
from leasekeeper.core.commit_port import CommitPort
from leasekeeper.core.copy_queue import CopyQueue
from leasekeeper.core.hooks import DispatchGate
from leasekeeper.core.lease_core import LeaseCore
from leasekeeper.core.leases import Grant, Pending, Settlement
from leasekeeper.core.unhandled import UnhandledSweep
from leasekeeper.core.window import ReadyWindow, of_types
from schemas.lease_answer import LeaseAnswer

__all__ = ["WorkerPort"]


class WorkerPort:
    def __init__(
        self,
        *,
        lock: threading.RLock,
        claimers: Claimers,
        core: LeaseCore,
        window: ReadyWindow,
        copies: CopyQueue,
        gates: Sequence[DispatchGate],
        unhandled: UnhandledSweep,
        commits: CommitPort,
        class_weights: Mapping[str, int],
        clock: Callable[[], float],
        monotonic: Callable[[], float],
    ) -> None:
        self._lock = lock
        self.claimers = claimers
        self._core = core
        self._window = window
        self._copies = copies
        self._gates = tuple(gates)
        self._unhandled = unhandled
        self._commits = commits
        self._clock = clock
        self._monotonic = monotonic
        default = class_weights.get(DEFAULT_CLASS, 0)
        # The classes dispatched at a higher weight than the default class (critical,
        # by default): a worker runs their jobs before those it claimed earlier and
        # has not started, or a prefetched batch of bulk work would delay them.
        self.run_first_classes = frozenset(
            name for name, weight in class_weights.items() if weight > default
        )

    def claim(
        self,
        worker: str,
        max_jobs: int,
        wait_s: float,
        job_types: frozenset[str] = frozenset(),
        *,
        reports_started: bool = False,
        start_now: int = 0,
        max_bytes: int = 0,
        size: Callable[[Pending], int] | None = None,
    ) -> list[Grant]:
        """Hand out up to ``max_jobs`` of ``job_types`` (empty: any type), waiting up to
        ``wait_s`` for the first one. Jobs of other types stay for other workers. A
        worker that ``reports_started`` gets back the attempt of a job that expires
        before it started (see ``started_only``), except the first ``start_now``,
        which go to idle handlers and count as started at once. ``max_bytes`` (0: no
        cap) bounds the answer's size, each job's by ``size`` (what its encoding takes,
        which only the RPC front knows): the jobs past it stay ready, not leased."""
        if max_bytes > 0 and size is None:
            raise ValueError("a claim capped in bytes needs the size of a job's encoding")
        deadline = self._monotonic() + wait_s
        accept = of_types(job_types)
        claimers = self.claimers
        with self._lock:
            self._unhandled.workers.saw(worker, job_types, now_ms(self._clock))
            while True:
                if not self._wait_for_work(job_types, deadline):
                    return []
                if claimers.closed:
                    # Draining for shutdown: hand out nothing new, but keep the long
                    # poll so workers do not spin while their last acks come in.
                    remaining = deadline - self._monotonic()
                    if remaining > 0:
                        claimers.wait(remaining, job_types)
                    return []
                grants, actions = self._core.lease_ready(worker, max_jobs, accept,
                                                         reports_started=reports_started,
                                                         start_now=start_now,
                                                         max_bytes=max_bytes,
                                                         size=size)  # fmt: skip
                self._copies.add(actions)
                if grants:
                    claimers.wake_next(self._window)  # what this claim left is another's
                    break
                # Only jobs a gate holds back wait: sleep until it lets one go, not spin.
                pause = self._gate_wait_s(job_types)
                remaining = deadline - self._monotonic()
                if pause <= 0 or remaining <= 0:
                    break
                claimers.wait(min(pause, remaining), job_types)
        return grants

    def _gate_wait_s(self, job_types: frozenset[str]) -> float:
        pause = 0.0
        for gate in self._gates:
            wait = gate.wait_s(job_types)
            if wait > 0 and (pause <= 0 or wait < pause):
                pause = wait
        return pause

    def _wait_for_work(self, job_types: frozenset[str], deadline: float) -> bool:
        """Wait until a job of ``job_types`` is ready and commits keep up, or the engine
        closes (True), or until ``deadline`` (False)."""
        window, commits, claimers = self._window, self._commits, self.claimers
        while (not window.has_any(job_types) or commits.behind()) and not claimers.closed:
            remaining = deadline - self._monotonic()
            if remaining <= 0:
                return False
            claimers.wait(remaining, job_types)
        return True

    def heartbeat(
        self,
        leases: list[tuple[str, str]],
        started: frozenset[str] = frozenset(),
        progress: Mapping[str, JobProgress] | None = None,
    ) -> list[LeaseAnswer]:
        """Extend leases; ``started`` names those whose handler has started, ``progress``
        has the latest progress of some (by lease id), held with their lease."""
        with self._lock:
            return self._core.heartbeat(leases, started, progress)

    def settle(self, settlements: list[Settlement]) -> list[LeaseAnswer]:
        """Acks are persisted before the answer; nacks are resolved once copied durably."""
        with self._lock:
            answers, actions = self._core.settle(settlements)
            self._copies.add(actions)
            self._sweep()
        return answers

    def expire(self) -> int:
        """The reaper: leases past ``until`` count as failed attempts (worker presumed dead),
        except a bounded number of never-started ones, which go back to the front with
        their attempt; returns the copies made."""
        with self._lock:
            actions = self._core.expire()
            self._copies.add(actions)
            self._sweep()
        return len(actions)

    def sweep_unhandled(self) -> int:
        """Ready jobs whose type no connected worker runs: note (durably) when that was
        first seen, and dead-letter those that waited past the grace; returns how many."""
        with self._lock:
            actions = self._unhandled.sweep(now_ms(self._clock))
            self._copies.add(actions)
        return len(actions)

    def _sweep(self) -> None:
        """What the gates take from the window after leases ended (a breaker that opened
        parks its type's ready jobs)."""
        for gate in self._gates:
            self._copies.add(gate.sweep(self._window))
