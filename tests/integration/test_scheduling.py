"""Delayed jobs, cancellations and dedupe keys end to end: the producer writes, the real
leasekeeper releases, skips and deduplicates, real worker processes run what is left.

Due times are read back from the envelopes on the tier topics (the producer's
``run_at_ms``; hops copy it unchanged), start times from the recording workers'
wall clock, so lateness is measured between the two clocks that matter.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import subprocess
import time
from dataclasses import replace

from jobcore.delay_tiers import DelayTiers
from producer import JobProducer, JobRequest
from schemas.codec import SchemaRegistry
from tests.apps.recording import SCHEMAS
from tests.system import BIN, System, wait_until

# Short tiers, so that 1-20 s delays wait in every tier and hop between them. The
# producer's tiers must be the leasekeeper's: it reads only its own tier topics.
TIERS = DelayTiers.parse("1s,2s,5s")
SCHEDULING = ["--retry-tiers", ",".join(TIERS.names)]


def producer(system: System) -> JobProducer:
    """A producer with the leasekeeper's tiers (``System.enqueue_requests`` uses the defaults)."""
    return JobProducer(system.kafka, registry=SchemaRegistry(extra_dirs=[SCHEMAS]), tiers=TIERS)


def delayed(system: System, n: int, delay: float, tenant: str = "tenant-0") -> JobRequest:
    return replace(system.task_request(n, tenant=tenant), delay=delay)


def due_ms(system: System, ids: list[str]) -> dict[str, int]:
    """Each job's ``run_at_ms`` as the producer wrote it on a tier topic."""
    found = {job_id: run_at_ms for job_id, run_at_ms, _, _ in tier_copies(system)}
    missing = set(ids) - set(found)
    assert not missing, f"{len(missing)} delayed jobs are on no tier topic"
    return {job_id: found[job_id] for job_id in ids}


def tier_copies(system: System) -> list[tuple[str, int, str, int]]:
    """(job id, run_at_ms, tier, produced_ms) of every copy on a tier topic: the
    producer's, then one per hop."""
    codec = system.codec()
    copies = []
    for tier, topic in zip(TIERS.names, TIERS.topics(system.topics), strict=True):
        for message in system.read_topic(topic):
            job = codec.decode(message.value())
            copies.append((job.job_id, job.run_at_ms, tier, message.timestamp()[1]))
    return copies


def explain(system: System, worst: list[str], delays: dict[str, float]) -> str:
    """Where the latest jobs waited: each tier copy as (tier, seconds before due)."""
    paths: dict[str, list[tuple[int, str]]] = {job_id: [] for job_id in worst}
    for job_id, run_at_ms, tier, produced_ms in tier_copies(system):
        if job_id in paths:
            paths[job_id].append((produced_ms - run_at_ms, tier))
    return "; ".join(
        f"delay {delays[j]:.2f}s via "
        + " > ".join(f"{tier}@{ms / 1000:+.2f}s" for ms, tier in sorted(paths[j]))
        for j in worst
    )


def started(system: System) -> set[str]:
    return {event.job_id for event in system.starts()}


def test_delayed_jobs_fire_within_a_second_of_their_due_time_and_never_early(
    system: System,
) -> None:
    system.configure(lease_s=10, extra=SCHEDULING)
    system.start(workers=2, concurrency=16)
    delays = [1.0 + 19.0 * i / 199 for i in range(200)]  # 1 s to 20 s, through every tier
    random.Random(7).shuffle(delays)  # a tenant's partition holds them out of due order
    with producer(system) as jobs:
        ids = jobs.enqueue_batch(
            delayed(system, n, d, tenant=f"t{n % 5}") for n, d in enumerate(delays)
        )
    due = due_ms(system, ids)
    wait_until(lambda: started(system) >= set(ids), 120, "every delayed job", step=0.25)

    first_start: dict[str, float] = {}
    for event in system.starts():
        first_start[event.job_id] = min(event.at, first_start.get(event.job_id, math.inf))
    late = {j: first_start[j] - due[j] / 1000 for j in ids}
    lateness = sorted(late.values())
    p99 = lateness[math.ceil(0.99 * len(lateness)) - 1]
    print(
        f"\ndelayed-job lateness over {len(ids)} jobs (1-20 s, tiers {','.join(TIERS.names)}): "
        f"p50 {statistics.median(lateness):.3f}s, p99 {p99:.3f}s, max {lateness[-1]:.3f}s, "
        f"min {lateness[0]:.3f}s"
    )
    if not 0 <= lateness[0] <= lateness[-1] <= 1.0:
        worst = sorted(ids, key=lambda j: abs(late[j] - 0.5))[-5:]
        delay_of = dict(zip(ids, delays, strict=True))
        print(f"latest or earliest: {explain(system, worst, delay_of)}")
    assert lateness[0] >= 0, f"a job started {-lateness[0]:.3f}s before its due time"
    assert lateness[-1] <= 1.0, f"a job started {lateness[-1]:.3f}s after its due time"
    wait_until(lambda: set(system.runs()) >= set(ids), 60, "every delayed job to finish")
    assert set(system.runs().values()) == {1}, "a delayed job ran twice"


def test_a_delayed_job_cancelled_while_it_waits_never_runs(system: System) -> None:
    system.configure(lease_s=10, extra=SCHEDULING)
    system.start(workers=1, concurrency=4)
    with producer(system) as jobs:
        doomed, kept = jobs.enqueue_batch([delayed(system, 0, 5.0), delayed(system, 1, 5.0)])
        time.sleep(1.0)  # the scenario: the cancellation comes while the job waits
        jobs.cancel(system.queue, doomed, reason="the customer changed their mind")
    due = due_ms(system, [doomed, kept])

    # Its twin, with the same delay in the same partition, runs: the path works.
    wait_until(lambda: kept in system.runs(), 60, "the job that was not cancelled")
    # Only waiting shows that something does not happen: until 3 s past the due time.
    time.sleep(max(0.0, due[doomed] / 1000 + 3.0 - time.time()))
    assert doomed not in started(system), "a cancelled job started"

    result = subprocess.run(
        [str(BIN / "leasekeeper"), "inspect", "job", doomed,
         "--target", system.leasekeeper.target, "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["state"] == "cancelled", result.stdout


def test_a_job_enqueued_twice_with_one_dedupe_key_runs_once(system: System) -> None:
    system.start(workers=1, concurrency=4)
    keyed = replace(system.task_request(0, tenant="acme"), dedupe_key="invoice-42")
    with producer(system) as jobs:
        [first] = jobs.enqueue_batch([keyed])
        [second] = jobs.enqueue_batch([keyed])
        # Dedupe keys belong to a tenant: another tenant's job with the key runs.
        [other] = jobs.enqueue_batch([replace(keyed, tenant_id="globex")])
        [after] = jobs.enqueue_batch([system.task_request(1, tenant="acme")])

    wait_until(lambda: {first, other, after} <= set(system.runs()), 60, "the keyed jobs")
    system.wait_caught_up(60)  # every record resolved, the duplicate included
    assert second not in started(system), "the duplicate ran"
    runs = system.runs()
    assert (runs[first], runs[other], runs[after]) == (1, 1, 1)


def test_a_dedupe_key_is_remembered_across_a_leasekeeper_restart(system: System) -> None:
    system.start(workers=1, concurrency=4)
    keyed = replace(system.task_request(0, tenant="acme"), dedupe_key="nightly@2030-01-01")
    with producer(system) as jobs:
        [first] = jobs.enqueue_batch([keyed])
    wait_until(lambda: first in system.acks(), 60, "the first job to run and be acked")

    system.leasekeeper.kill()
    system.restart_leasekeeper()
    with producer(system) as jobs:
        [second] = jobs.enqueue_batch([keyed])
        [after] = jobs.enqueue_batch([system.task_request(1, tenant="acme")])

    wait_until(lambda: after in system.runs(), 90, "the job behind the duplicate")
    system.wait_caught_up(60)
    assert second not in started(system), "the duplicate ran after the restart"
    assert system.runs()[first] == 1
