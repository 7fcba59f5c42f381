"""The relay keeps its lock session alive, and only alive: the session asks the server
to end it after the lock timeout without a statement, and the relay runs one well
inside that, waiting for a NOTIFY, on standby and while Kafka is slow. The real
``OutboxRelay`` over the fake connection of ``test_outbox_relay_rows``."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, cast

import psycopg
import pytest

from jobcore.kafka import KafkaSettings
from producer.api import Delivered, JobProducer
from producer.outbox import relay as relay_module
from producer.outbox.recovery import KafkaPositions
from producer.outbox.relay import OutboxRelay, RelayConfig
from schemas.job import Job
from tests.unit.test_outbox_relay_rows import (
    Cur,
    FakeConn,
    FakeProducer,
    Positions,
    StopEvent,
    job,
    run_until_waits,
)


@dataclass
class Recording(FakeConn):
    statements: list[str] = field(default_factory=list)
    locked: bool = True
    pinged: threading.Event = field(default_factory=threading.Event)

    def execute(self, sql: str, params: Any = ()) -> Cur:
        text = " ".join(sql.split())
        self.statements.append(text)
        if text == "SELECT 1":
            self.pinged.set()
        if "pg_try_advisory_lock" in text and not self.locked:
            return Cur([(False,)])
        return super().execute(sql, params)


def make_relay(producer: object, **config: Any) -> OutboxRelay:
    return OutboxRelay(
        RelayConfig(dsn="x", **config), cast(JobProducer, producer), cast(KafkaSettings, None)
    )


def test_the_session_ends_after_the_lock_timeout_and_each_wait_wakes_to_ping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conn = Recording()
    relay = make_relay(FakeProducer(), poll_interval_s=5.0, lock_timeout_s=3.0)
    run_until_waits(relay, conn, 3, monkeypatch)
    assert "SET idle_session_timeout = 3000" in conn.statements
    assert "SET idle_in_transaction_session_timeout = 3000" in conn.statements
    assert conn.waits == [1.0, 1.0, 1.0]  # a third of the lock timeout, not the poll interval
    after_waits = conn.statements[-3:]
    assert conn.statements.count("SELECT 1") == 3 and after_waits[-1] == "SELECT 1"


def test_the_lock_session_uses_tcp_keepalives_and_a_user_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, Any] = {}
    conn = Recording()

    def connect(dsn: str, **kwargs: Any) -> Recording:
        seen.update(kwargs)
        return conn

    monkeypatch.setattr(relay_module.psycopg, "connect", connect)
    monkeypatch.setattr(relay_module, "KafkaPositions", lambda settings: Positions())
    stop = StopEvent()
    conn.stop, conn.stop_after_waits = stop, 1
    make_relay(FakeProducer(), lock_timeout_s=6.0).run(stop)
    assert seen["keepalives"] == 1 and seen["tcp_user_timeout"] == 6000
    assert seen["keepalives_idle"] <= 2 and seen["autocommit"] is True


def test_a_standby_tries_the_lock_within_the_ping_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = Recording(locked=False)
    stop = StopEvent()
    monkeypatch.setattr(relay_module.psycopg, "connect", lambda *a, **k: conn)
    make_relay(FakeProducer(), poll_interval_s=5.0, lock_timeout_s=3.0).run(stop)
    assert stop.waited == [1.0]


@dataclass
class SlowAcks(FakeProducer):
    """Acknowledges a record only once the relay's session was pinged meanwhile (or
    after 10 s, so a failing test ends)."""

    conn: Recording = field(default_factory=Recording)

    def diversion_topic(self, queue: str) -> str | None:
        return None  # diverts nothing

    def send_job(self, job: Job, *, divert: bool = True) -> Future[Delivered]:
        future: Future[Delivered] = Future()
        delivered = Delivered(job_id=job.job_id, topic="jobs.q", partition=0, offset=1)

        def ack() -> None:
            self.conn.pinged.wait(10)
            future.set_result(delivered)

        threading.Thread(target=ack, daemon=True).start()
        return future


def test_the_session_is_pinged_while_the_relay_waits_on_kafka() -> None:
    conn = Recording()
    conn.stage(job(1))
    relay = make_relay(SlowAcks(conn=conn), lock_timeout_s=1.0)
    relay.relay_batch(cast(psycopg.Connection[Any], conn), cast(KafkaPositions, Positions()))
    assert relay.relayed == 1
    marked = "UPDATE job_outbox_relay SET inflight_max_id = %s, marks = %s::jsonb"
    sent = conn.statements.index(marked)
    assert "SELECT 1" in conn.statements[sent:], "no ping while the acknowledgements were due"
