"""A dependency outage with the circuit breaker, against real Kafka, a real leasekeeper
and a worker process.

2,000 ``storm_call`` jobs call a fake dependency (an HTTP server in this process)
that is down for ``OUTAGE_S`` from the first call and serves everything after.
Without a breaker every one of them would call, fail and be retried through the
outage, each call spending one of the job's attempts. With the breaker:

- it opens after ``MIN_CALLS`` failures (50 % of at least 20 calls in 30 s);
- the calls made during the outage are at most the calls before it opened
  (``MIN_CALLS`` + the worker's slots, which were leased already) plus the probes
  of each half-open cycle that began during the outage, not one per job;
- ``noop`` jobs enqueued once it is open start before its first probe could go:
  the 2,000 parked jobs do not hold them back;
- after recovery every job succeeds, and none reaches the DLQ.

The outage is the issue's 20 s; the cool-down is 8 s (doubled to 16 s after a
failed probe), so one half-open cycle begins during the outage and the one at
about 24 s finds the dependency back. The test takes about 40 s; the baseline
without a breaker (marked slow) another 25 s.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from jobcore.kafka import KafkaSettings
from leasekeeper.breaker.feed import BreakerRecord
from leasekeeper.breaker.states import BreakerState
from producer import JobRequest
from tests.apps.outage import SCHEMAS
from tests.apps.recording import read_events, read_log
from tests.integration.test_retry_storm import Dependency
from tests.system import System, WorkerProcess, wait_until

pytestmark = pytest.mark.kafka

JOBS_A = 2_000
JOBS_B = 200
OUTAGE_S = 20.0
BUCKET_S = 0.5
MIN_CALLS = 20
SLOTS = 32  # the worker's concurrency
PREFETCH = 2  # as passed below (the default): the worker holds SLOTS x PREFETCH leases
PROBES = 3
COOLDOWN_S = 8.0
COOLDOWN_MAX_S = 60.0
TENANTS = 8


BREAKER = [
    "--breaker", f"storm_call=50%/{MIN_CALLS}/30s",
    "--breaker-default", "off",
    "--breaker-cooldown", f"{COOLDOWN_S:g}s",
    "--breaker-cooldown-max", f"{COOLDOWN_MAX_S:g}s",
    "--breaker-probes", str(PROBES),
]  # fmt: skip


def half_open_cycles_in(outage_s: float) -> int:
    """Half-open cycles that can begin before the outage ends when the breaker opens at
    its start (it opens later, so no more begin): each failed probe doubles the
    cool-down."""
    cycles, at, cooldown = 0, 0.0, COOLDOWN_S
    while at + cooldown < outage_s:
        at += cooldown
        cycles += 1
        cooldown = min(COOLDOWN_MAX_S, cooldown * 2)
    return cycles


def test_the_breaker_parks_a_failing_type_and_lets_the_others_run(
    kafka: KafkaSettings, unique: str, tmp_path: Path
) -> None:
    dependency = Dependency(capacity=1_000_000, outage_s=OUTAGE_S, bucket_s=BUCKET_S).start()
    system = System(kafka, unique, tmp_path)
    system.configure(lease_s=30, extra=[*BREAKER, "--retry-tiers", "1s,2s,5s,10s"])
    try:
        _start(system, dependency, tmp_path)

        # The breaker opens; from its snapshot, the earliest moment a probe may go.
        opened: dict[str, Any] = {}

        def breaker_open() -> bool:
            asked_at = time.time()
            view = _breaker(system.leasekeeper.snapshot())
            if view is None or view["state"] != "open":
                return False
            opened.update(view, earliest_probe=asked_at + view["next_probe_in_s"] - 0.05)
            return True

        wait_until(breaker_open, 30, "the storm_call breaker to open",
                   describe=lambda: _breaker(system.leasekeeper.snapshot()))  # fmt: skip
        assert dependency.elapsed_s() < OUTAGE_S, "the breaker opened only after the outage"
        # Published for the other leasekeepers of the queue (and the next start).
        wait_until(lambda: any(r.state is BreakerState.OPEN for r in _published(system)), 10,
                   "the open breaker on the breaker topic")  # fmt: skip

        b_ids = set(
            system.enqueue_requests(
                JobRequest(
                    queue=system.queue,
                    type="noop",
                    payload={"n": n},
                    tenant_id=f"tenant-{n % TENANTS}",
                )
                for n in range(JOBS_B)
            )
        )
        wait_until(
            lambda: b_ids <= set(read_events(system.recordings, "starts")),
            60,
            "every noop job to start",
        )
        b_starts = [e.at for e in read_log(system.recordings, "starts") if e.job_id in b_ids]

        wait_until(
            lambda: len(set(read_events(system.recordings, "runs"))) >= JOBS_A + JOBS_B,
            120,
            "every job to succeed after the outage",
            describe=lambda: (
                len(set(read_events(system.recordings, "runs"))),
                _breaker(system.leasekeeper.snapshot()),
            ),
        )
        snapshot = system.leasekeeper.snapshot() or {}
    finally:
        system.stop()
        dependency.stop()

    curve = dependency.curve()
    during = sum(curve[: int(OUTAGE_S / BUCKET_S)])
    cycles = half_open_cycles_in(OUTAGE_S)
    bound = MIN_CALLS + SLOTS * PREFETCH + PROBES * cycles
    print(
        f"\nbreaker outage: {JOBS_A} jobs, outage {OUTAGE_S:g}s: {during} calls during the "
        f"outage (bound {MIN_CALLS} + {SLOTS} x {PREFETCH} + {PROBES} x {cycles} = {bound}); "
        f"{sum(curve)} calls in all; parked {snapshot.get('counters', {}).get('parked')}; "
        f"breaker {opened.get('reason')!r}; last noop start "
        f"{max(b_starts) - opened['earliest_probe']:+.2f}s from the earliest probe"
    )
    assert during <= bound, f"{during} calls during the outage, above {bound}: {curve}"
    late = [at for at in b_starts if at >= opened["earliest_probe"]]
    assert not late, (
        f"{len(late)} of {JOBS_B} noop jobs enqueued after the breaker opened started after "
        f"its first probe could go ({opened['earliest_probe']:.2f})"
    )
    assert snapshot["counters"]["parked"] > 0
    assert snapshot["counters"]["dead"] == 0
    assert system.dead_letters() == []


@pytest.mark.slow
def test_without_a_breaker_every_job_calls_during_the_outage(
    kafka: KafkaSettings, unique: str, tmp_path: Path
) -> None:
    """The baseline the bound above is measured against (BENCHMARKS.md): the same
    outage with breakers off, watched until it ends."""
    dependency = Dependency(capacity=1_000_000, outage_s=OUTAGE_S, bucket_s=BUCKET_S).start()
    system = System(kafka, unique, tmp_path)
    system.configure(lease_s=30, extra=["--breaker-default", "off",
                                        "--retry-tiers", "1s,2s,5s,10s"])  # fmt: skip
    try:
        _start(system, dependency, tmp_path)
        wait_until(lambda: dependency.elapsed_s() > OUTAGE_S, 60, "the end of the outage")
        snapshot = system.leasekeeper.snapshot() or {}
    finally:
        system.stop()
        dependency.stop()
    during = sum(dependency.curve()[: int(OUTAGE_S / BUCKET_S)])
    print(
        f"\nno breaker: {JOBS_A} jobs, outage {OUTAGE_S:g}s: {during} calls during the outage; "
        f"retried {snapshot.get('counters', {}).get('retried')}"
    )
    assert during >= JOBS_A


def _start(system: System, dependency: Dependency, tmp: Path) -> None:
    """The leasekeeper, one worker with ``SLOTS`` slots, and the ``storm_call`` jobs."""
    system.start(workers=0)
    worker = WorkerProcess(
        app="tests.apps.outage:app",
        target=system.leasekeeper.target,
        log=tmp / "worker.log",
        env={"RECORDING_DIR": str(system.recordings), "STORM_URL": dependency.url},
        concurrency=SLOTS,
        extra_args=["--schema-path", str(SCHEMAS), "--log-level", "ERROR", "--prefetch", "2"],
    )
    system.workers.append(worker.start())
    system.enqueue_requests(
        JobRequest(
            queue=system.queue,
            type="storm_call",
            payload={"n": n},
            tenant_id=f"tenant-{n % TENANTS}",
        )
        for n in range(JOBS_A)
    )


def _published(system: System) -> list[BreakerRecord]:
    return [
        BreakerRecord.decode(m.value() or b"")
        for m in system.read_topic(system.topics.breakers)
        if m.key() == b"storm_call"
    ]


def _breaker(snapshot: dict[str, Any] | None) -> dict[str, Any] | None:
    for view in (snapshot or {}).get("breakers", []):
        if view["type"] == "storm_call":
            return dict(view)
    return None
