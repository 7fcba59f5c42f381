"""A settle claims the settled jobs' places only while the queue has a backlog."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from workers.context import JobContext
from workers.inflight import InFlight
from workers.messages import ClaimAsk, Lease, LeaseRef, Settlement
from workers.runtime import _Refill


def _lease(i: int) -> Lease:
    return Lease(
        ref=LeaseRef(lease_id=f"t/0/{i}", token="tok"), until_ms=0, attempt=1, envelope=b"",
        lease_s=30,
    )  # fmt: skip


def _finished(table: InFlight, i: int) -> tuple[Settlement, Any]:
    ctx = JobContext(job_id=f"j{i}", attempt=1, tenant_id="t", queue="q", type="noop",
                     created_at_ms=0, lease_id=f"t/0/{i}")  # fmt: skip
    held = table.add(_lease(i), ctx, now=0.0, beat_interval_s=10.0)
    assert table.start(held, now=0.0, timeout_s=None)
    assert table.decide(held)
    table.finish(held)
    return Settlement.ack(held.ref), held


def _refill() -> tuple[_Refill, InFlight, list[tuple[int, int]]]:
    table = InFlight(concurrency=4)
    accepted: list[tuple[int, int]] = []
    worker: Any = SimpleNamespace(
        _stopping=threading.Event(),
        _table=table,
        _types=SimpleNamespace(runnable=["noop"]),
        _reports_started=True,
        _idle_handlers=lambda: 0,
        _accept=lambda leases, free: accepted.append((len(leases), free)),
    )
    return _Refill(worker), table, accepted


def test_a_settle_claims_nothing_until_a_claim_came_back_full() -> None:
    refill, table, _ = _refill()
    batch = [_finished(table, 1)]
    assert refill.ask(batch) is None  # no claim answered yet: no backlog known
    refill.answered(asked=4, got=1)  # the queue keeps up: claims come back short
    assert refill.ask(batch) is None
    assert table.free() == 3  # nothing reserved

    refill.answered(asked=4, got=4)  # a backlog: the claim got all it asked for
    ask = refill.ask(batch)
    assert ask == ClaimAsk(max_jobs=1, job_types=("noop",), reports_started=True, start_now=0)
    assert table.free() == 2  # the settled job's slot is reserved for the settle's claim


def test_a_short_answer_to_a_settles_claim_ends_the_refill_and_frees_the_slots() -> None:
    refill, table, accepted = _refill()
    refill.answered(asked=2, got=2)
    batch = [_finished(table, 1), _finished(table, 2)]
    ask = refill.ask(batch)
    assert ask is not None and ask.max_jobs == 2
    for _, held in batch:
        table.answer(held)
    refill.claimed(ask, [_lease(10)])  # one job came back for two places
    assert accepted == [(1, 2)]
    assert table.free() == 4  # reservation given back (the fake accept added nothing)
    assert refill.ask([_finished(table, 3)]) is None  # the queue ran dry: claim loop's turn
