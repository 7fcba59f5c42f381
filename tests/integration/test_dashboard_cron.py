"""The Scheduled page lists cron entries with their next and last fires, read from
Kafka alone: a real scheduler fires on the real broker, and the dashboard (in process,
over HTTP) shows what its leader published, without the schedulers' configuration."""

from __future__ import annotations

import re
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import pytest

from jobcore.kafka import KafkaSettings
from jobcore.topic_admin import ensure_queue_topics
from leasekeeper.dashboard.access import AccessPolicy
from leasekeeper.dashboard.actions import Actions
from leasekeeper.dashboard.fleet_view import FleetState
from leasekeeper.dashboard.kafka_view import KafkaView
from leasekeeper.dashboard.server import Dashboard, DashboardServer
from leasekeeper.dlq.entries import format_ms
from producer.scheduler import CronEntry, CronSchedule, Scheduler, SchedulerOptions
from schemas.codec import EnvelopeCodec, SchemaRegistry
from tests.system import wait_until

pytestmark = pytest.mark.kafka


def entry(name: str, queue: str, schedule: str, timezone: str = "UTC") -> CronEntry:
    return CronEntry(name=name, schedule=schedule, timezone=timezone, queue=queue, type="noop",
                     tenant="acme", payload={"n": 1})  # fmt: skip


@contextmanager
def running(scheduler: Scheduler) -> Iterator[None]:
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
        assert not thread.is_alive(), "the scheduler did not stop"


@contextmanager
def dashboard(kafka: KafkaSettings) -> Iterator[str]:
    served = Dashboard(
        fleet=FleetState(),
        kafka=KafkaView(kafka, "jobs"),
        actions=Actions(kafka=kafka, prefix="jobs", codec=EnvelopeCodec(SchemaRegistry())),
        policy=AccessPolicy(token=None),
        base="/ops",
    )
    server = DashboardServer(served, "127.0.0.1", 0)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}/ops"
    finally:
        server.stop()


def scheduled(url: str) -> str:
    with urllib.request.urlopen(f"{url}/scheduled", timeout=60) as response:
        return str(response.read().decode())


def cron_rows(page: str, scheduler: str) -> dict[str, str]:
    """Entry name -> the HTML of its row in the cron table, for one scheduler group (the
    shared broker holds other tests' groups too)."""
    rows = re.findall(r"<tr>(.*?)</tr>", page.split("<h2>Cron entries</h2>", 1)[1], re.S)
    found = {}
    for row in rows:
        name = re.search(r'^<td>([^<]+)</td><td><span class="cron-entry">([^<]+)<', row)
        if name and name.group(1) == scheduler:
            found[name.group(2)] = row
    return found


def test_the_scheduled_page_shows_cron_entries_with_next_and_last_fires(
    kafka: KafkaSettings, unique: str
) -> None:
    queue = f"cron{unique}"
    ensure_queue_topics(kafka, queue, partitions=1)
    options = SchedulerOptions(name=f"board{unique}")
    fired: list[tuple[datetime, str]] = []
    tick = entry("tick", queue, "*/1 * * * * *")
    nightly = entry("nightly", queue, "0 3 * * *", timezone="Europe/Berlin")
    scheduler = Scheduler(kafka, options=options, entries=[tick, nightly],
                          on_fire=lambda fire, job_id: fired.append((fire.at, job_id)))  # fmt: skip
    with running(scheduler):
        wait_until(lambda: len(fired) >= 2, 40, "two fires of the tick entry")
    last_at, last_job = fired[-1]
    stopped_at = datetime.now(UTC)

    with dashboard(kafka) as url:
        rows = cron_rows(scheduled(url), options.name)
        assert set(rows) == {"tick", "nightly"}, rows
        assert "*/1 * * * * * (UTC)" in rows["tick"]
        assert f'href="/ops/queues/{queue}"' in rows["tick"]
        last_ms = round(last_at.timestamp() * 1000)
        assert f'class="cron-last">{format_ms(last_ms)} (' in rows["tick"]
        assert f'href="/ops/job?id={last_job}&amp;queue={queue}"' in rows["tick"]
        # The leader stopped after that fire: the next one is the second after it.
        assert f'cron-next">{format_ms(last_ms + 1000)} (' in rows["tick"]
        upcoming = CronSchedule.parse("0 3 * * *", "Europe/Berlin").next_after(stopped_at)
        next_ms = round(upcoming.timestamp() * 1000)
        assert "0 3 * * * (Europe/Berlin)" in rows["nightly"]
        assert f'class="cron-next">{format_ms(next_ms)} (in ' in rows["nightly"]
        assert 'class="muted cron-last">never<' in rows["nightly"]

    # A leader with only one of the entries: the other leaves the page.
    alone = Scheduler(kafka, options=options, entries=[nightly])
    with running(alone):
        # The board is replaced (and durable) before the term begins.
        wait_until(lambda: alone.is_leader, 30, "the second scheduler to lead")
    with dashboard(kafka) as url:
        rows = cron_rows(scheduled(url), options.name)
        assert set(rows) == {"nightly"}, rows
