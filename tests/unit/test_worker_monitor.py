"""The lease monitor: batched heartbeats, refusals, local expiry and time limits."""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence

from schemas.lease_answer import LeaseAnswer
from workers.client import LeaseKeeperUnavailable
from workers.context import JobContext
from workers.inflight import Held, InFlight
from workers.messages import ClaimedJob, LeaseRef
from workers.monitor import LeaseMonitor


class ScriptedClient:
    """Answers heartbeats from ``refuse`` (lease_id -> reason); records every batch."""

    def __init__(self) -> None:
        self.batches: list[list[LeaseRef]] = []
        self.started: list[set[str]] = []
        self.refuse: dict[str, str] = {}
        self.down = False

    def heartbeat(
        self, refs: Sequence[LeaseRef], /, started: Collection[str] = ()
    ) -> list[LeaseAnswer]:
        self.batches.append(list(refs))
        self.started.append(set(started))
        if self.down:
            raise LeaseKeeperUnavailable("gone", reconnecting=True)
        return [
            LeaseAnswer(
                lease_id=r.lease_id,
                ok=r.lease_id not in self.refuse,
                reason=self.refuse.get(r.lease_id, ""),
                until_ms=99_000,
            )
            for r in refs
        ]


class Clocks:
    def __init__(self) -> None:
        self.now = 0.0
        self.wall_ms = 10_000


def _add(table: InFlight, i: int, *, lease_s: int = 3, until_ms: int = 40_000) -> Held:
    lease = ClaimedJob(
        ref=LeaseRef(lease_id=f"t/0/{i}", token=f"tok{i}"),
        until_ms=until_ms,
        attempt=1,
        envelope=b"",
        lease_s=lease_s,
    )
    ctx = JobContext(
        job_id=f"j{i}",
        attempt=1,
        tenant_id="t",
        queue="q",
        type="noop",
        created_at_ms=0,
        lease_id=lease.ref.lease_id,
    )
    return table.add(lease, ctx, now=0.0, beat_interval_s=lease_s / 3)


def _monitor(
    table: InFlight, client: ScriptedClient, clocks: Clocks, timeouts: list[Held] | None = None
) -> LeaseMonitor:
    return LeaseMonitor(
        table=table,
        client=client,
        on_timeout=(timeouts if timeouts is not None else []).append,
        stop=threading.Event(),
        clock=lambda: clocks.now,
        wall_ms=lambda: clocks.wall_ms,
    )


def test_one_heartbeat_carries_every_held_lease_once_the_first_is_due() -> None:
    table, client, clocks = InFlight(concurrency=4), ScriptedClient(), Clocks()
    first, second = _add(table, 1), _add(table, 2, lease_s=30)
    monitor = _monitor(table, client, clocks)

    clocks.now = 0.5
    monitor.tick()
    assert client.batches == []
    clocks.now = 1.0  # lease 1 is a third through
    monitor.tick()
    assert client.batches == [[first.ref, second.ref]]
    assert first.until_ms == second.until_ms == 99_000
    monitor.tick()
    assert len(client.batches) == 1, "not due again until another interval passed"


def test_a_refused_lease_is_marked_lost_and_no_longer_heartbeated() -> None:
    table, client, clocks = InFlight(concurrency=4), ScriptedClient(), Clocks()
    refused, kept = _add(table, 1), _add(table, 2)
    client.refuse["t/0/1"] = "stale token"
    monitor = _monitor(table, client, clocks)

    clocks.now = 1.0
    monitor.tick()
    assert refused.ctx.lease_lost_reason == "heartbeat refused: stale token"
    assert not kept.ctx.is_cancelled
    clocks.now = 2.0
    monitor.tick()
    assert client.batches[-1] == [kept.ref]


def test_a_failed_heartbeat_is_retried_sooner_and_an_expired_lease_is_given_up() -> None:
    table, client, clocks = InFlight(concurrency=4), ScriptedClient(), Clocks()
    held = _add(table, 1, lease_s=30, until_ms=20_000)
    client.down = True
    monitor = _monitor(table, client, clocks)

    clocks.now = 10.0
    monitor.tick()
    assert held.next_beat_at == 11.0, "retried after ~1 s, not a full interval"
    assert not held.ctx.is_cancelled
    clocks.wall_ms = 20_001  # the leasekeeper's deadline passed without an extension
    monitor.tick()
    assert held.ctx.lease_lost_reason is not None
    assert held.ctx.lease_lost_reason.startswith("lease expired")


def test_an_overdue_handler_is_reported_once_per_tick() -> None:
    table, client, clocks = InFlight(concurrency=4), ScriptedClient(), Clocks()
    held = _add(table, 1)
    table.start(held, now=0.0, timeout_s=0.5)
    timeouts: list[Held] = []
    monitor = _monitor(table, client, clocks, timeouts)

    clocks.now = 0.4
    monitor.tick()
    assert timeouts == []
    clocks.now = 0.5
    monitor.tick()
    assert timeouts == [held]
