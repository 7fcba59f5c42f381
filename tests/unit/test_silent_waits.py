"""Silent waits speak. A job whose type no connected worker runs: warned about within
a minute, in the log, in ``inspect`` (text and JSON) and on the dashboard, and no
longer once a worker for it connects. A leasekeeper whose brokers do not answer says
Kafka is down. A worker started before its leasekeeper's socket exists says so."""

from __future__ import annotations

import io
import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from jobcore.kafka import KafkaSettings
from jobcore.plain import plain
from leasekeeper.core.store import LeaseStore
from leasekeeper.dashboard.fleet_view import FleetState
from leasekeeper.dashboard.kafka_view import QueueOffsets
from leasekeeper.dashboard.pages import queue_page
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.ops import cli
from leasekeeper.ops.service import LeaseKeeperService, ServeConfig
from leasekeeper.views.fleet import fleet_record
from leasekeeper.views.inspect_view import render_snapshot
from tests.unit.test_engine import Clock
from tests.unit.test_engine_channel import TP, typed
from tests.unit.test_worker_support import Envelopes, FakeLeaseKeeper, running_worker, start_server
from workers.app import App
from workers.context import JobContext


def _engine(path: Path, clock: Clock) -> LeaseEngine:
    config = EngineConfig(lease_s=10, unknown_type_grace_s=600, queue="orders")
    return LeaseEngine(store=LeaseStore(path), config=config, clock=clock, monotonic=clock)


def _tick(engine: LeaseEngine, clock: Clock, seconds: float) -> None:
    """``seconds`` of the consumer loop: the mailer claims, the sweep runs each 0.5 s."""
    for _ in range(int(seconds * 2)):
        clock.now += 0.5
        engine.workers.claim("mailer", 1, wait_s=0, job_types=frozenset({"email", "sms"}))
        engine.workers.sweep_unhandled()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name == "leasekeeper.core.unhandled"
    ]


def test_a_type_no_worker_runs_is_warned_about_once_and_clears_when_one_connects(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="leasekeeper.core.unhandled")
    clock = Clock()
    engine = _engine(tmp_path, clock)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, typed(0, "video"), b"x")
    engine.fetch.offer(TP, 1, typed(1, "video"), b"x")
    start_ms = int(clock.now * 1000)
    _tick(engine, clock, 60)

    (wait,) = plain(engine.views.snapshot())["unhandled"]  # type: ignore[misc]
    assert wait["type"] == "video" and wait["queue"] == "orders" and wait["jobs"] == 2
    assert wait["topics"] == ["jobs.q"] and wait["handled"] == ["email", "sms"]
    assert start_ms < wait["since_ms"] <= start_ms + 1000
    assert wait["dead_at_ms"] == wait["since_ms"] + 600_000
    (line,) = _warnings(caplog)
    assert "'video'" in line and "queue orders" in line and "2 jobs" in line
    assert "they run: email, sms" in line and "UnknownJobType" in line
    assert "Start a worker that registers 'video'" in line and "spelling" in line

    _tick(engine, clock, 60)  # it lasts: not logged again so soon
    assert len(_warnings(caplog)) == 1

    engine.workers.claim("video-worker", 0, wait_s=0, job_types=frozenset({"video"}))
    engine.workers.sweep_unhandled()
    assert plain(engine.views.snapshot())["unhandled"] == []
    assert len(_warnings(caplog)) == 1
    assert any("no ready job of type 'video'" in r.getMessage() for r in caplog.records)


def test_a_wait_that_lasts_is_logged_again_every_few_minutes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    engine = _engine(tmp_path, clock)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, typed(0, "video"), b"x")
    _tick(engine, clock, 340)
    assert len(_warnings(caplog)) == 2


def test_a_worker_started_a_few_seconds_later_is_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    engine = _engine(tmp_path, clock)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, typed(0, "video"), b"x")
    _tick(engine, clock, 10)
    engine.workers.claim("video-worker", 0, wait_s=0, job_types=frozenset({"video"}))
    _tick(engine, clock, 60)
    assert _warnings(caplog) == [] and engine.views.snapshot().unhandled == ()


NOW_MS = 1_765_000_000_000
WAIT = {
    "type": "vidéo<b>",
    "queue": "orders",
    "topics": ["jobs.orders"],
    "jobs": 3,
    "since_ms": NOW_MS - 45_000,
    "dead_at_ms": NOW_MS + 555_000,
    "handled": ["email", "sms"],
}


def _snapshot(**fields: Any) -> dict[str, Any]:
    return {"queue": "orders", "ready": 3, "partitions": [], "counters": {}, **fields}


def test_inspect_shows_the_wait_with_its_fix() -> None:
    out = io.StringIO()
    render_snapshot(_snapshot(unhandled=[WAIT]), Console(file=out, width=300), now_ms=NOW_MS)
    text = out.getvalue()
    assert "3 jobs of type 'vidéo<b>' in queue orders" in text
    assert "(45 s)" in text and "they run: email, sms" in text
    assert "Start a worker that registers 'vidéo<b>'" in text


class _Offsets:
    """The dashboard's Kafka view of a queue with nothing to show."""

    def offsets(self, queue: str) -> QueueOffsets:
        return QueueOffsets(queue=queue, ready=(), tiers={}, dlq_depth=0, oldest_ready_ms=None)


def test_the_queue_page_shows_the_wait_a_leasekeeper_published() -> None:
    fleet = FleetState()
    snapshot = _snapshot(unhandled=[WAIT])
    record = fleet_record(snapshot, instance="orders@lk-1", now_ms=NOW_MS, max_leases=10)
    fleet.apply("orders@lk-1", json.dumps(record).encode())
    html = queue_page("", "orders", fleet, _Offsets(), NOW_MS)  # type: ignore[arg-type]
    assert "No worker runs these job types" in html
    assert "vidéo&lt;b&gt;" in html and "orders@lk-1" in html and "email, sms" in html
    assert "Start a worker that registers" in html
    quiet = FleetState()
    record = fleet_record(_snapshot(), instance="orders@lk-1", now_ms=NOW_MS, max_leases=10)
    quiet.apply("orders@lk-1", json.dumps(record).encode())
    assert "No worker runs" not in queue_page("", "orders", quiet, _Offsets(), NOW_MS)  # type: ignore[arg-type]


def test_inspect_says_kafka_is_down_while_no_broker_answers(tmp_path: Path) -> None:
    socket = f"unix:{tmp_path / 'lk.sock'}"
    config = ServeConfig(queue="q", kafka=KafkaSettings(bootstrap="127.0.0.1:1"),
                         state_dir=tmp_path / "state", listen=socket,
                         publish_interval_s=0)  # fmt: skip
    service = LeaseKeeperService(config)
    # Not the Kafka loop: its connect attempt waits 10 s for an answer, and stop() for it.
    service._thread = threading.Thread(target=service._stop.wait, daemon=True)
    service.start()
    try:
        assert service.kafka_probe.checked.wait(30)
        as_json = CliRunner().invoke(cli.main, ["inspect", "--json", "--target", socket])
        as_text = CliRunner().invoke(cli.main, ["inspect", "--target", socket])
    finally:
        service.stop()
    assert as_json.exit_code == 0, as_json.output
    snapshot = json.loads(as_json.output)
    assert snapshot["kafka"] == "down" and snapshot["unhandled"] == []
    assert as_text.exit_code == 0, as_text.output
    assert "kafka down" in as_text.output


class _Warned(logging.Handler):
    """Each WARNING of the worker's client, and an event set at the first."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        self.first = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        self.first.set()


def test_a_worker_started_before_its_socket_says_so_then_connects_when_it_appears(
    tmp_path: Path,
) -> None:
    sock = tmp_path / "lk.sock"
    app, ran = App("test"), threading.Event()

    @app.job("noop")
    def noop(ctx: JobContext, payload: dict[str, Any]) -> None:
        ran.set()

    warned = _Warned()
    logger = logging.getLogger("workers.client")
    logger.addHandler(warned)
    server = None
    try:
        with running_worker(app, f"unix:{sock}"):
            assert warned.first.wait(10)  # at the first claim
            server = start_server(FakeLeaseKeeper([Envelopes()("noop")]), sock)
            assert ran.wait(30)  # it kept retrying, and connected
    finally:
        logger.removeHandler(warned)
        if server is not None:
            server.stop(0).wait()
    (line,) = warned.lines
    assert f"no socket at {sock} (the path does not exist)" in line
    assert "until it appears" in line and "leasekeeper serve --queue" in line
