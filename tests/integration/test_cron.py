"""Cron against real Kafka: one job per fire, a leader failover that loses no fire
time, and misfire policies after downtime.

Job-run dedupe belongs to the leasekeeper; here every fire time must reach the
queue with its ``name@fire_time`` dedupe key, and duplicates (the same key twice,
from a failover) are counted and reported, not forbidden. The last test runs the
failover through a real leasekeeper and worker, where each fire time must run
exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest
from click.testing import CliRunner

from jobcore.kafka import (
    OFFSET_BEGINNING,
    KafkaSettings,
    TopicPartition,
    end_offsets,
    make_consumer,
)
from producer import ensure_queue_topics
from producer.cli import main as producer_cli
from producer.scheduler import CronEntry, MisfirePolicy, Scheduler, SchedulerOptions
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job
from tests.system import System, wait_until

pytestmark = pytest.mark.kafka

PRODUCER = Path(sys.executable).with_name("producer")
SESSION_TIMEOUT_MS = 6000


def read_jobs(kafka: KafkaSettings, queue: str) -> list[Job]:
    """Every job on ``jobs.<queue>`` (one partition), decoded."""
    topic = f"jobs.{queue}"
    consumer = make_consumer(kafka, f"reader-{topic}-{time.monotonic_ns()}")
    try:
        high = end_offsets(consumer, topic, [0])[0]
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        codec = EnvelopeCodec(SchemaRegistry())
        jobs: list[Job] = []
        deadline = time.monotonic() + 30
        while len(jobs) < high and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.5):
                if message.error() is None:
                    jobs.append(codec.decode(message.value()))
        assert len(jobs) == high, f"read {len(jobs)} of {high} jobs"
        return jobs
    finally:
        consumer.close()


def fire_time(job: Job) -> datetime:
    """The fire time in the job's dedupe key ``name@2025-01-01T00:00:00Z``."""
    assert job.dedupe_key is not None
    _, _, stamp = job.dedupe_key.partition("@")
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def keys_of(jobs: list[Job], name: str) -> list[datetime]:
    return [fire_time(job) for job in jobs if (job.dedupe_key or "").startswith(f"{name}@")]


def noop_entry(
    name: str,
    queue: str,
    schedule: str,
    *,
    timezone: str = "UTC",
    misfire: MisfirePolicy = MisfirePolicy.CATCH_UP_ONCE,
) -> CronEntry:
    return CronEntry(
        name=name,
        schedule=schedule,
        timezone=timezone,
        queue=queue,
        type="noop",
        tenant="acme",
        payload={"n": 1},
        misfire=misfire,
    )


@contextmanager
def running(scheduler: Scheduler) -> Iterator[threading.Thread]:
    """``scheduler.run`` in a thread, stopped (gracefully) on exit."""
    stop = threading.Event()
    failure: list[BaseException] = []

    def target() -> None:
        try:
            scheduler.run(stop)
        except BaseException as exc:
            failure.append(exc)
            raise

    thread = threading.Thread(target=target, name="scheduler", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        stop.set()
        thread.join(30)
        assert not thread.is_alive(), "scheduler did not stop"
    assert not failure, failure


class FakeClock:
    """Epoch seconds that move only when the test says so."""

    def __init__(self, now: datetime) -> None:
        self.now = now.timestamp()

    def __call__(self) -> float:
        return self.now

    def set(self, instant: datetime) -> None:
        self.now = instant.timestamp()


def test_one_scheduler_fires_once_per_second_without_gaps_or_repeats(
    kafka: KafkaSettings, unique: str
) -> None:
    queue = f"cron{unique}"
    ensure_queue_topics(kafka, queue, partitions=1)
    fired: list[str] = []
    scheduler = Scheduler(
        kafka,
        options=SchedulerOptions(name=f"one{unique}"),
        entries=[noop_entry("tick", queue, "*/1 * * * * *")],
        on_fire=lambda fire, job_id: fired.append(fire.dedupe_key),
    )
    with running(scheduler):
        wait_until(lambda: len(fired) >= 6, 40, "six fires")

    times = keys_of(read_jobs(kafka, queue), "tick")
    assert len(times) >= 6
    assert len(set(times)) == len(times), f"a fire time repeats: {times}"
    gaps = {b - a for a, b in pairwise(times)}
    assert gaps == {timedelta(seconds=1)}, f"not consecutive seconds: {times}"


def test_misfire_policies_after_downtime(kafka: KafkaSettings, unique: str) -> None:
    """Downtime is simulated by the injected clock; election and state are real Kafka."""
    queue = f"cron{unique}"
    ensure_queue_topics(kafka, queue, partitions=1)
    options = SchedulerOptions(name=f"misfire{unique}")
    entries = [
        noop_entry("catch", queue, "* * * * *", misfire=MisfirePolicy.CATCH_UP_ONCE),
        noop_entry("skip", queue, "* * * * *", misfire=MisfirePolicy.SKIP),
    ]
    t0 = datetime(2030, 1, 1, 0, 0, tzinfo=UTC)
    clock = FakeClock(t0 - timedelta(seconds=0.5))
    fired: list[str] = []

    def scheduler() -> Scheduler:
        return Scheduler(
            kafka,
            options=options,
            entries=entries,
            clock=clock,
            on_fire=lambda fire, job_id: fired.append(fire.dedupe_key),
        )

    first = scheduler()
    with running(first):
        wait_until(lambda: first.is_leader, 30, "the first scheduler to lead")
        clock.set(t0 + timedelta(seconds=0.2))
        wait_until(lambda: len(fired) == 2, 20, "both entries to fire at t0")

    # Ten minutes and twenty seconds of downtime: fires 00:01 .. 00:10 are missed.
    clock.set(t0 + timedelta(minutes=10, seconds=20))
    second = scheduler()
    with running(second):
        wait_until(lambda: len(fired) == 3, 30, "the catch-up fire")
        time.sleep(1.0)  # real time: nothing else may fire at a frozen 00:10:20
        assert len(fired) == 3
        clock.set(t0 + timedelta(minutes=11, seconds=0.2))
        wait_until(lambda: len(fired) == 5, 20, "both entries to resume at 00:11")

    jobs = read_jobs(kafka, queue)
    minutes = [t0 + timedelta(minutes=m) for m in (0, 10, 11)]
    assert keys_of(jobs, "catch") == minutes  # exactly one job for the missed window
    assert keys_of(jobs, "skip") == [minutes[0], minutes[2]]  # none for it


def test_cron_list_shows_the_last_fire_from_the_state_topic(
    kafka: KafkaSettings, unique: str, tmp_path: Path
) -> None:
    queue = f"cron{unique}"
    ensure_queue_topics(kafka, queue, partitions=1)
    name = f"list{unique}"
    t0 = datetime(2030, 1, 1, 0, 0, tzinfo=UTC)
    clock = FakeClock(t0 - timedelta(seconds=0.5))
    fired: list[str] = []
    scheduler = Scheduler(
        kafka,
        options=SchedulerOptions(name=name),
        entries=[noop_entry("nightly", queue, "0 0 * * *", timezone="Europe/Berlin")],
        clock=clock,
        on_fire=lambda fire, job_id: fired.append(fire.dedupe_key),
    )
    with running(scheduler):
        wait_until(lambda: scheduler.is_leader, 30, "leadership")
        clock.set(t0 + timedelta(hours=23, seconds=0.2))  # midnight in Berlin
        wait_until(lambda: bool(fired), 20, "the fire")
    config = tmp_path / "cron.toml"
    config.write_text(
        f'[[cron]]\nname = "nightly"\nschedule = "0 0 * * *"\ntimezone = "Europe/Berlin"\n'
        f'queue = "{queue}"\ntype = "noop"\ntenant = "acme"\n'
    )
    result = CliRunner().invoke(
        producer_cli,
        ["cron", "list", "--config", str(config), "--bootstrap", kafka.bootstrap, "--group", name],
        env={"COLUMNS": "200", "JOBS_TOPIC_PREFIX": "jobs"},
    )
    assert result.exit_code == 0, result.output
    assert fired == ["nightly@2030-01-01T23:00:00Z"]
    row = next(line for line in result.output.splitlines() if "nightly" in line)
    assert "Europe/Berlin" in row and "2030-01-01T23:00:00Z" in row


# -- two scheduler processes, the leader killed -------------------------------------------


class SchedulerProcess:
    """One ``producer cron run`` process; its log tells whether it leads and what it fired."""

    def __init__(self, config: Path, bootstrap: str, log: Path) -> None:
        self.log = log
        clean = {k: v for k, v in os.environ.items() if k not in ("JOBS_TOPIC_PREFIX",)}
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [str(PRODUCER), "cron", "run", "--config", str(config), "--bootstrap", bootstrap],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=clean,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def leads(self) -> bool:
        self.assert_alive()
        return "became the cron leader" in self.text()

    def fires(self) -> int:
        return self.text().count("cron fired ")

    def assert_alive(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"scheduler exited: {self.text()[-3000:]}")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def failover_config(tmp_path: Path, unique: str, queue: str) -> Path:
    """A ``*/2 * * * * *`` noop entry on ``queue``; the recording worker knows ``noop``."""
    config = tmp_path / "cron.toml"
    config.write_text(
        f'[scheduler]\nname = "failover{unique}"\nsession_timeout_ms = {SESSION_TIMEOUT_MS}\n\n'
        f'[[cron]]\nname = "every2"\nschedule = "*/2 * * * * *"\nqueue = "{queue}"\n'
        'type = "noop"\ntenant = "acme"\npayload = { n = 2 }\n'
    )
    return config


def kill_the_leader(config: Path, bootstrap: str, tmp_path: Path) -> float:
    """Two scheduler processes; the leader is killed (-9) just after a fire and the
    follower fires for about 10 s more. Returns when the leader was killed."""
    first = SchedulerProcess(config, bootstrap, tmp_path / "first.log")
    second: SchedulerProcess | None = None
    try:
        wait_until(first.leads, 60, "the first scheduler to lead")
        second = SchedulerProcess(config, bootstrap, tmp_path / "second.log")
        wait_until(lambda: first.fires() >= 5, 30, "the leader to fire for ~10 s")
        seen = first.fires()
        wait_until(lambda: first.fires() > seen, 10, "one more fire", step=0.005)
        killed_at = time.time()
        first.kill()  # just after a fire: the takeover gap is the failover itself
        assert not second.leads(), "the follower led while the leader was alive"
        wait_until(second.leads, SESSION_TIMEOUT_MS / 1000 + 10, "the follower to take over")
        wait_until(lambda: second.fires() >= 5, 30, "the new leader to fire for ~10 s")
    finally:
        first.stop()
        if second is not None:
            second.stop()
    return killed_at


def missing_fire_times(times: list[datetime]) -> list[datetime]:
    """The fire times every two seconds between the first and the last that have no job."""
    distinct = sorted(set(times))
    expected = {
        distinct[0] + timedelta(seconds=2 * i)
        for i in range(int((distinct[-1] - distinct[0]).total_seconds()) // 2 + 1)
    }
    return sorted(expected - set(distinct))


@pytest.mark.slow
def test_a_killed_leader_is_replaced_within_a_session_timeout_and_no_fire_time_is_lost(
    kafka: KafkaSettings, unique: str, tmp_path: Path
) -> None:
    queue = f"cron{unique}"
    ensure_queue_topics(kafka, queue, partitions=1)
    config = failover_config(tmp_path, unique, queue)
    killed_at = kill_the_leader(config, kafka.bootstrap, tmp_path)

    jobs = read_jobs(kafka, queue)
    times = keys_of(jobs, "every2")
    distinct = sorted(set(times))
    expected = [
        distinct[0] + timedelta(seconds=2 * i)
        for i in range(int((distinct[-1] - distinct[0]).total_seconds()) // 2 + 1)
    ]
    assert distinct == expected, f"missing fire times: {sorted(set(expected) - set(distinct))}"
    duplicates = {t: n for t, n in Counter(times).items() if n > 1}
    before = [j.created_at_ms for j in jobs if j.created_at_ms < killed_at * 1000]
    after = [j.created_at_ms for j in jobs if j.created_at_ms >= killed_at * 1000]
    gap_s = (min(after) - max(before)) / 1000
    print(
        f"\n{len(distinct)} fire times over {distinct[-1] - distinct[0]}, {len(jobs)} jobs, "
        f"{sum(duplicates.values()) - len(duplicates)} duplicate(s) {sorted(duplicates)}, "
        f"takeover gap {gap_s:.2f}s"
    )
    assert gap_s <= SESSION_TIMEOUT_MS / 1000 + 2, f"takeover took {gap_s:.2f}s"


@pytest.mark.slow
def test_through_a_leasekeeper_every_fire_time_of_a_failover_runs_exactly_once(
    system: System, unique: str, tmp_path: Path
) -> None:
    system.start(workers=1, concurrency=4)
    config = failover_config(tmp_path, unique, system.queue)
    kill_the_leader(config, system.kafka.bootstrap, tmp_path)

    codec = system.codec()
    jobs = [codec.decode(m.value()) for m in system.read_topic(system.topics.ready)]
    times = keys_of(jobs, "every2")
    assert not missing_fire_times(times), f"missing fire times: {missing_fire_times(times)}"
    system.wait_caught_up(60)  # every job resolved: run, or skipped as a duplicate
    runs = system.runs()
    runs_per_fire = Counter({fire_time(job): 0 for job in jobs})
    for job in jobs:
        runs_per_fire[fire_time(job)] += runs[job.job_id]
    duplicates = len(jobs) - len(runs_per_fire)
    print(f"\n{len(runs_per_fire)} fire times, {len(jobs)} jobs ({duplicates} duplicate keys)")
    wrong = {t.isoformat(): n for t, n in runs_per_fire.items() if n != 1}
    assert not wrong, f"fire times that did not run exactly once: {wrong}"
