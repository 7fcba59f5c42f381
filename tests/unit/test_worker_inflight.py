"""Slot accounting of held jobs: a slot is free only once a job both stopped and was settled."""

from __future__ import annotations

import threading

from devtools.waiting import wait_until
from workers.context import JobContext
from workers.inflight import InFlight, Phase
from workers.messages import ClaimedJob, LeaseRef


def _lease(i: int, lease_s: int = 30) -> ClaimedJob:
    return ClaimedJob(
        ref=LeaseRef(lease_id=f"t/0/{i}", token=f"tok{i}"),
        until_ms=0,
        attempt=1,
        envelope=b"",
        lease_s=lease_s,
    )


def _ctx(i: int) -> JobContext:
    return JobContext(
        job_id=f"j{i}",
        attempt=1,
        tenant_id="t",
        queue="q",
        type="noop",
        created_at_ms=0,
        lease_id=f"t/0/{i}",
    )


def test_a_slot_frees_only_when_the_job_finished_and_its_settle_was_answered() -> None:
    table = InFlight(concurrency=2)
    held = table.add(_lease(1), _ctx(1), now=0.0, beat_interval_s=10.0)
    assert table.free() == 1
    assert table.start(held, now=0.0, timeout_s=None)
    assert table.decide(held)
    table.answer(held)  # settled, but the handler thread is still busy
    assert table.free() == 1
    table.finish(held)
    assert table.free() == 2


def test_only_one_party_may_settle_a_job() -> None:
    table = InFlight(concurrency=1)
    held = table.add(_lease(1), _ctx(1), now=0.0, beat_interval_s=10.0)
    assert table.decide(held)
    assert not table.decide(held)


def test_a_job_taken_back_before_it_started_never_starts() -> None:
    table = InFlight(concurrency=2)
    waiting = table.add(_lease(1), _ctx(1), now=0.0, beat_interval_s=10.0)
    running = table.add(_lease(2), _ctx(2), now=0.0, beat_interval_s=10.0)
    assert table.start(running, now=0.0, timeout_s=None)
    assert table.take_unstarted() == [waiting]
    assert waiting.phase is Phase.DONE
    assert not table.start(waiting, now=1.0, timeout_s=None)


def test_one_due_lease_brings_every_held_lease_into_the_heartbeat() -> None:
    table = InFlight(concurrency=3)
    short = table.add(_lease(1, lease_s=3), _ctx(1), now=0.0, beat_interval_s=1.0)
    long = table.add(_lease(2, lease_s=30), _ctx(2), now=0.0, beat_interval_s=10.0)
    lost = table.add(_lease(3), _ctx(3), now=0.0, beat_interval_s=1.0)
    lost.ctx.mark_lease_lost("stale token")
    assert table.beats_due(0.5) == []
    assert table.next_due() == 1.0
    assert table.beats_due(1.0) == [short, long]
    table.reschedule([short, long], now=1.0)
    assert (short.next_beat_at, long.next_beat_at) == (2.0, 11.0)
    table.reschedule([short, long], now=2.0, retry_s=0.5)
    assert (short.next_beat_at, long.next_beat_at) == (2.5, 2.5)


def test_deadlines_are_due_only_for_running_unsettled_jobs() -> None:
    table = InFlight(concurrency=2)
    held = table.add(_lease(1), _ctx(1), now=0.0, beat_interval_s=10.0)
    assert table.timeouts_due(100.0) == []
    table.start(held, now=0.0, timeout_s=5.0)
    assert table.timeouts_due(4.9) == []
    assert table.timeouts_due(5.0) == [held]
    table.decide(held)
    assert table.timeouts_due(5.0) == []


def test_the_monitor_is_woken_only_by_a_job_it_must_see_before_it_would_wake() -> None:
    """Waking the monitor for every job added, started and freed cost a thread switch
    each; it is woken only when a job's heartbeat or deadline comes before its own
    wake-up, and then at once."""
    table = InFlight(concurrency=4)
    wakes: list[str] = []
    notify_all = table._cond.notify_all

    def counted() -> None:
        wakes.append("wake")
        notify_all()

    table._cond.notify_all = counted  # type: ignore[method-assign]
    monitor = threading.Thread(target=table.wait_change, args=(30.0,), kwargs={"until": 5.0})
    monitor.start()
    wait_until(lambda: table._monitor_until == 5.0, what="the monitor asleep until 5.0")
    later = table.add(_lease(1), _ctx(1), now=0.0, beat_interval_s=10.0)  # beat at 10.0
    assert table.start(later, now=0.0, timeout_s=60.0)  # deadline at 60.0
    table.finish(later)
    assert wakes == [] and monitor.is_alive()
    sooner = table.add(_lease(2), _ctx(2), now=0.0, beat_interval_s=10.0)
    assert table.start(sooner, now=0.0, timeout_s=1.0)  # deadline at 1.0: before 5.0
    monitor.join(10)
    assert wakes == ["wake"] and not monitor.is_alive()
