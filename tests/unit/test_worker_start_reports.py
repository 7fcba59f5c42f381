"""A prefetching worker reports which jobs started, on a fake clock: a job still
running ``start_report_s`` after its start is reported (once) without waiting for the
next heartbeat, a job that finished sooner costs no call, and regular heartbeats say
which held jobs are running."""

from __future__ import annotations

import threading

from tests.unit.test_worker_monitor import Clocks, ScriptedClient, _add
from workers.inflight import InFlight
from workers.monitor import LeaseMonitor


def _monitor(table: InFlight, client: ScriptedClient, clocks: Clocks) -> LeaseMonitor:
    return LeaseMonitor(
        table=table,
        client=client,
        on_timeout=lambda held: None,
        stop=threading.Event(),
        clock=lambda: clocks.now,
        wall_ms=lambda: clocks.wall_ms,
        start_report_s=0.02,
    )


def test_a_job_running_past_the_report_delay_is_reported_once() -> None:
    table, client, clocks = InFlight(concurrency=4), ScriptedClient(), Clocks()
    running, waiting = _add(table, 1, lease_s=30), _add(table, 2, lease_s=30)
    monitor = _monitor(table, client, clocks)
    clocks.now = 0.1
    assert table.start(running, now=clocks.now, timeout_s=None)
    assert table.next_due(0.02) == 0.1 + 0.02
    clocks.now = 0.11
    monitor.tick()
    assert client.batches == []  # not yet: it may finish before the report is due
    clocks.now = 0.125
    monitor.tick()
    assert client.batches == [[running.ref]] and client.started == [{"t/0/1"}]
    clocks.now = 0.5
    monitor.tick()
    assert len(client.batches) == 1  # reported once; the waiting job needs no report
    clocks.now = 10.0  # the regular heartbeat carries both, and says which one runs
    monitor.tick()
    assert client.batches[-1] == [running.ref, waiting.ref]
    assert client.started[-1] == {"t/0/1"}


def test_a_job_that_finished_before_the_delay_is_never_reported() -> None:
    table, client, clocks = InFlight(concurrency=4), ScriptedClient(), Clocks()
    quick = _add(table, 1, lease_s=30)
    monitor = _monitor(table, client, clocks)
    assert table.start(quick, now=0.0, timeout_s=None)
    assert table.decide(quick)  # its ack is on its way
    clocks.now = 0.05
    monitor.tick()
    assert client.batches == []


def test_a_refused_report_is_not_marked_as_reported_but_the_job_is_lost() -> None:
    table, client, clocks = InFlight(concurrency=4), ScriptedClient(), Clocks()
    held = _add(table, 1, lease_s=30)
    client.refuse["t/0/1"] = "stale token"
    monitor = _monitor(table, client, clocks)
    assert table.start(held, now=0.0, timeout_s=None)
    clocks.now = 0.05
    monitor.tick()
    assert not held.start_reported and held.ctx.is_cancelled
