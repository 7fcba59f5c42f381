"""Retries through delay-tier topics, against real Kafka: attempts, permanent errors,
Retry-After timing, and a DLQ replay after the dependency is fixed."""

from __future__ import annotations

import statistics
import subprocess
from collections import defaultdict

from tests.apps.recording import read_log
from tests.system import BIN, System, wait_until

# Short tiers and backoff; no retry budget (its deferrals are tested in unit tests) and
# no breakers: 90 jobs failing at once on purpose look like an outage to a breaker,
# which would park their retries (tested in test_breaker_outage.py).
FAST_RETRIES = [
    "--retry-base", "0.2", "--retry-tiers", "1s,2s,5s", "--retry-budget", "1.0",
    "--breaker-default", "off",
]  # fmt: skip


def test_a_job_that_always_fails_is_dead_after_exactly_max_attempts(system: System) -> None:
    system.configure(lease_s=10, extra=FAST_RETRIES)
    system.start(workers=1, concurrency=4)
    (always,) = system.enqueue_tasks(1, fail_attempts=99, max_attempts=4)
    (permanent,) = system.enqueue_tasks(1, fail_attempts=99, permanent=True, max_attempts=4)

    wait_until(lambda: len(system.dead_letters()) == 2, 60, "two dead letters", step=0.2)
    letters = {system.codec().decode(d.envelope).job_id: d for d in system.dead_letters()}
    always_job = system.codec().decode(letters[always].envelope)
    assert letters[always].reason == "attempts exhausted"
    assert [(e.attempt, e.error_class) for e in always_job.errors] == [
        (n, "ConnectionError") for n in (1, 2, 3, 4)
    ]
    permanent_job = system.codec().decode(letters[permanent].envelope)
    assert letters[permanent].reason == "permanent error"
    assert [(e.attempt, e.error_class) for e in permanent_job.errors] == [(1, "Permanent")]
    attempts = defaultdict(list)
    for event in system.starts():
        attempts[event.job_id].append(event.attempt)
    assert sorted(attempts[always]) == [1, 2, 3, 4]
    assert attempts[permanent] == [1]


def test_retry_after_delays_fire_within_a_second_and_never_early(system: System) -> None:
    system.configure(lease_s=10, extra=FAST_RETRIES)
    system.start(workers=2, concurrency=16)
    delays_ms = [1_000 + 250 * (i % 45) for i in range(90)]  # 1 s to 12 s, through every tier
    ids = system.enqueue_requests(
        system.task_request(n, fail_attempts=1, retry_after_ms=d, tenant=f"t{n % 5}")
        for n, d in enumerate(delays_ms)
    )
    wait_until(lambda: set(system.runs()) >= set(ids), 90, "every delayed retry", step=0.25)

    failed = {e.job_id: e.at for e in read_log(system.recordings, "failures")}
    second = {e.job_id: e.at for e in system.starts() if e.attempt == 2}
    delay_of = dict(zip(ids, delays_ms, strict=True))
    lateness = sorted(second[j] - (failed[j] + delay_of[j] / 1000) for j in ids)
    p99 = lateness[int(0.99 * (len(lateness) - 1))]
    print(
        f"retry-after lateness over {len(ids)} jobs: median {statistics.median(lateness):.3f}s, "
        f"p99 {p99:.3f}s, max {lateness[-1]:.3f}s, min {lateness[0]:.3f}s"
    )
    assert lateness[0] >= 0, "a retry fired before its delay"
    assert p99 <= 1.0


def test_dead_letters_replayed_after_the_fix_all_succeed_once(system: System) -> None:
    system.configure(lease_s=10, extra=FAST_RETRIES)
    broken = system.recordings / "broken"
    broken.touch()
    system.start(workers=2, concurrency=16)
    ids = system.enqueue_tasks(1_000, fail_while_broken=True)
    wait_until(lambda: len(system.dead_letters()) == 1_000, 90, "1,000 dead letters", step=0.5)
    assert not system.runs()

    broken.unlink()  # the dependency is fixed
    replay = _dlq(system, "replay")
    assert replay.returncode == 0, replay.stderr
    wait_until(lambda: set(system.runs()) >= set(ids), 90, "every replayed job", step=0.25)
    runs = system.runs()
    assert all(runs[j] == 1 for j in ids), "a replayed job ran twice"
    again = _dlq(system, "replay")  # nothing new to replay: the group committed
    assert again.returncode == 0
    assert system.runs() == runs


def _dlq(system: System, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "leasekeeper"), "dlq", *args, "--queue", system.queue,
         "--bootstrap", system.kafka.bootstrap],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
