"""The worker runtime against an in-process fake LeaseKeeper on a Unix socket."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_worker_support import (
    Envelopes,
    FakeLeaseKeeper,
    running_worker,
    serving,
    start_server,
    wait_until,
)
from workers.app import App
from workers.client import LeaseKeeperClient, LeaseKeeperRejected
from workers.context import JobContext
from workers.errors import Permanent, Retry
from workers.runtime import Worker, settle_batch_for


@pytest.fixture
def envelopes() -> Envelopes:
    return Envelopes()


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "lk.sock"


def test_sync_and_async_handlers_run_and_are_acked(envelopes: Envelopes, sock: Path) -> None:
    app = App("test")
    seen: list[tuple[str, str, dict[str, Any]]] = []
    confirmed: list[tuple[str, str, bool]] = []

    @app.job("noop")
    def noop(ctx: JobContext, payload: dict[str, Any]) -> None:
        seen.append(("sync", ctx.job_id, payload))

    @app.job("send_receipt")
    async def send_receipt(ctx: JobContext, payload: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        seen.append(("async", ctx.job_id, payload))

    @app.on_settled
    def settled(ctx: JobContext, outcome: str, accepted: bool) -> None:
        confirmed.append((ctx.job_id, outcome, accepted))

    receipt = {"order_id": 7, "email": "a@example.com", "amount_cents": 1250}
    fake = FakeLeaseKeeper(
        [envelopes("noop", {"n": 1}), envelopes("send_receipt", receipt), envelopes("noop")]
    )
    with serving(fake, sock) as target, running_worker(app, target):
        wait_until(lambda: len(fake.outcomes("ack")) == 3, what="3 acks")
        wait_until(lambda: len(confirmed) == 3, what="3 on_settled calls")

    assert sorted(kind for kind, _, _ in seen) == ["async", "sync", "sync"]
    assert ("sync", "job-1", {"n": 1}) in seen
    assert ("async", "job-2", {**receipt, "currency": "EUR"}) in seen
    assert sorted(confirmed) == [(f"job-{i}", "ack", True) for i in (1, 2, 3)]
    assert all(s.accepted for s in fake.settled)


def test_exception_is_nacked_with_class_message_and_traceback(
    envelopes: Envelopes, sock: Path
) -> None:
    app = App()

    @app.job("noop")
    def explode(ctx: JobContext, payload: dict[str, Any]) -> None:
        raise ValueError(f"bad n {payload['n']}")

    fake = FakeLeaseKeeper([envelopes("noop", {"n": 3})])
    with serving(fake, sock) as target, running_worker(app, target):
        wait_until(lambda: len(fake.settled) == 1)

    [nack] = fake.settled
    assert (nack.outcome, nack.error_class, nack.error_message) == ("nack", "ValueError", "bad n 3")
    assert "in explode" in nack.traceback
    assert nack.traceback.rstrip().endswith("ValueError: bad n 3")
    assert (nack.permanent, nack.retry_after_s) == (False, 0.0)


def test_retry_after_becomes_retry_after_s(envelopes: Envelopes, sock: Path) -> None:
    app = App()

    @app.job("noop")
    def later(ctx: JobContext, payload: dict[str, Any]) -> None:
        raise Retry("rate limited", after=5)

    fake = FakeLeaseKeeper([envelopes()])
    with serving(fake, sock) as target, running_worker(app, target):
        wait_until(lambda: len(fake.settled) == 1)

    [nack] = fake.settled
    assert (nack.outcome, nack.retry_after_s, nack.permanent) == ("nack", 5.0, False)
    assert nack.error_message == "rate limited"


def test_each_settlement_reports_the_handlers_own_run_time(
    envelopes: Envelopes, sock: Path
) -> None:
    """The cost weighted fair queuing charges: the handler's run, not claim-to-settle."""
    app = App()

    @app.job("noop")
    def slow(ctx: JobContext, payload: dict[str, Any]) -> None:
        threading.Event().wait(0.05)  # the job's own work

    @app.job("send_receipt")
    def failing(ctx: JobContext, payload: dict[str, Any]) -> None:
        raise ConnectionError("down")

    receipt = {"order_id": 7, "email": "a@example.com", "amount_cents": 1250}
    fake = FakeLeaseKeeper([envelopes(), envelopes("send_receipt", receipt)])
    with serving(fake, sock) as target, running_worker(app, target):
        wait_until(lambda: len(fake.settled) == 2)

    by_outcome = {s.outcome: s for s in fake.settled}
    assert by_outcome["ack"].run_s >= 0.05
    assert by_outcome["nack"].run_s > 0


def test_permanent_is_nacked_permanent(envelopes: Envelopes, sock: Path) -> None:
    app = App()

    @app.job("noop")
    def never(ctx: JobContext, payload: dict[str, Any]) -> None:
        raise Permanent("address does not exist")

    fake = FakeLeaseKeeper([envelopes()])
    with serving(fake, sock) as target, running_worker(app, target):
        wait_until(lambda: len(fake.settled) == 1)

    [nack] = fake.settled
    assert (nack.outcome, nack.permanent, nack.error_class) == ("nack", True, "Permanent")
    assert nack.error_message == "address does not exist"


def test_never_more_jobs_in_hand_than_concurrency_without_prefetch(
    envelopes: Envelopes, sock: Path
) -> None:
    app = App()
    gate = threading.Event()
    lock = threading.Lock()
    running = [0, 0]  # now, peak

    @app.job("noop")
    def slow(ctx: JobContext, payload: dict[str, Any]) -> None:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        gate.wait(10)
        with lock:
            running[0] -= 1

    fake = FakeLeaseKeeper([envelopes() for _ in range(20)])
    with (
        serving(fake, sock) as target,
        running_worker(app, target, concurrency=3, prefetch=1) as rw,
    ):
        wait_until(lambda: running[0] == 3, what="3 handlers running")
        assert rw.worker.in_hand == 3
        assert len(fake.outstanding) == 3
        gate.set()
        wait_until(lambda: len(fake.outcomes("ack")) == 20, what="20 acks")

    assert fake.max_outstanding <= 3
    assert running[1] == 3
    assert fake.claims[0] == 3, "one batched claim for every free slot"
    assert max(fake.claims) <= 3


def test_long_job_is_heartbeated_with_its_current_token(envelopes: Envelopes, sock: Path) -> None:
    app = App()
    release = threading.Event()

    @app.job("noop")
    def long(ctx: JobContext, payload: dict[str, Any]) -> None:
        release.wait(10)

    fake = FakeLeaseKeeper([envelopes()], lease_s=1)  # heartbeat every 1/3 s
    with serving(fake, sock) as target, running_worker(app, target):
        wait_until(lambda: len(fake.heartbeats) >= 2, what="two heartbeats")
        release.set()
        wait_until(lambda: len(fake.settled) == 1)

    [ack] = fake.settled
    assert (ack.outcome, ack.accepted) == ("ack", True)
    assert fake.heartbeats[:2] == [[(ack.lease_id, ack.token)]] * 2


def test_refused_heartbeat_sets_lease_lost_and_the_job_is_not_acked(
    envelopes: Envelopes, sock: Path
) -> None:
    app = App()
    reasons: list[str | None] = []

    @app.job("noop")
    def long(ctx: JobContext, payload: dict[str, Any]) -> None:
        assert ctx.lease_lost.wait(10), "lease never reported lost"
        reasons.append(ctx.lease_lost_reason)
        assert ctx.is_cancelled

    fake = FakeLeaseKeeper([envelopes()], lease_s=1)
    fake.refuse_heartbeat["jobs.test/0/1"] = "stale token"
    with serving(fake, sock) as target, running_worker(app, target) as rw:
        wait_until(lambda: reasons != [], what="the handler to see the lost lease")
        wait_until(lambda: rw.worker.in_hand == 0, what="the slot to be freed")

    assert reasons == ["heartbeat refused: stale token"]
    assert fake.settled == [], "a job whose lease was lost must not be acked"


def test_stop_releases_claimed_jobs_that_have_not_started(envelopes: Envelopes, sock: Path) -> None:
    app = App()
    ran: list[str] = []

    @app.job("noop")
    def handler(ctx: JobContext, payload: dict[str, Any]) -> None:
        ran.append(ctx.job_id)

    fake = FakeLeaseKeeper()
    fake.claim_gate = threading.Event()
    with serving(fake, sock) as target, running_worker(app, target, concurrency=4) as rw:
        wait_until(lambda: fake.claims_in_progress == 1, what="a claim in flight")
        fake.add(envelopes(), envelopes())
        rw.worker.stop()  # the claim in flight answers after stop: those jobs must not run
        fake.claim_gate.set()
        rw.stop()

    assert ran == []
    assert sorted(s.outcome for s in fake.settled) == ["release", "release"]
    assert all(s.accepted for s in fake.settled)


def test_stop_lets_running_jobs_finish_within_the_grace_period(
    envelopes: Envelopes, sock: Path
) -> None:
    app = App()
    ran: list[str] = []
    release = threading.Event()

    @app.job("noop")
    def handler(ctx: JobContext, payload: dict[str, Any]) -> None:
        ran.append(ctx.job_id)
        release.wait(10)

    fake = FakeLeaseKeeper([envelopes()])
    with serving(fake, sock) as target, running_worker(app, target, shutdown_grace_s=10) as rw:
        wait_until(lambda: ran == ["job-1"])
        rw.worker.stop()
        fake.add(envelopes(), envelopes())  # too late: a claim racing stop() releases them
        release.set()
        rw.stop()
        assert fake.outstanding == {}

    assert ran == ["job-1"]
    outcomes = {s.lease_id: s.outcome for s in fake.settled}
    assert outcomes.pop("jobs.test/0/1") == "ack"
    assert set(outcomes.values()) <= {"release"}


def test_jobs_outliving_the_grace_period_are_released(envelopes: Envelopes, sock: Path) -> None:
    app = App()
    reasons: list[str | None] = []

    @app.job("noop")
    def stubborn(ctx: JobContext, payload: dict[str, Any]) -> None:
        ctx.lease_lost.wait(10)
        reasons.append(ctx.lease_lost_reason)

    fake = FakeLeaseKeeper([envelopes()])
    with serving(fake, sock) as target, running_worker(app, target, shutdown_grace_s=0.2) as rw:
        wait_until(lambda: rw.worker.in_hand == 1)
        rw.stop()
        wait_until(lambda: reasons != [])

    assert [s.outcome for s in fake.settled] == ["release"]
    assert reasons[0] is not None and reasons[0].startswith("worker shutting down")


def test_a_job_with_no_handler_is_released_not_dead_lettered(
    envelopes: Envelopes, sock: Path
) -> None:
    """Another worker, or this one after a deploy, may have the handler: the worker
    gives the job back (attempt refunded) instead of sending it to the DLQ."""
    app = App()  # no handler for mystery_job (nor a schema: it is never decoded)
    fake = FakeLeaseKeeper([envelopes("mystery_job", raw_payload=b"")])
    with serving(fake, sock) as target, running_worker(app, target):
        wait_until(lambda: len(fake.settled) >= 1)

    release = fake.settled[0]
    assert (release.outcome, release.error_class) == ("release", "")


def test_undecodable_envelope_and_payload_are_nacked_permanent(
    envelopes: Envelopes, sock: Path
) -> None:
    app = App()
    ran: list[str] = []

    @app.job("noop")
    def handler(ctx: JobContext, payload: dict[str, Any]) -> None:
        ran.append(ctx.job_id)

    fake = FakeLeaseKeeper([b"not an envelope", envelopes("noop", raw_payload=b"\xc3\x01junk")])
    with serving(fake, sock) as target, running_worker(app, target):
        wait_until(lambda: len(fake.settled) == 2)

    assert ran == []
    for nack in fake.settled:
        assert (nack.outcome, nack.permanent, nack.error_class) == (
            "nack",
            True,
            "PayloadDecodeError",
        )
    messages = sorted(s.error_message for s in fake.settled)
    assert messages[0].startswith("cannot decode envelope")
    assert messages[1].startswith("cannot decode noop payload")


def test_handler_timeout_nacks_and_cancels(envelopes: Envelopes, sock: Path) -> None:
    app = App()
    reasons: list[str | None] = []

    @app.job("noop", timeout_s=0.2)
    def sync_slow(ctx: JobContext, payload: dict[str, Any]) -> None:
        ctx.lease_lost.wait(10)
        reasons.append(ctx.lease_lost_reason)

    @app.job("send_receipt", timeout_s=0.2)
    async def async_slow(ctx: JobContext, payload: dict[str, Any]) -> None:
        await asyncio.sleep(30)

    receipt = {"order_id": 1, "email": "e", "amount_cents": 1}
    fake = FakeLeaseKeeper([envelopes("noop"), envelopes("send_receipt", receipt)])
    with serving(fake, sock) as target, running_worker(app, target) as rw:
        wait_until(lambda: len(fake.settled) == 2)
        wait_until(lambda: rw.worker.in_hand == 0)

    assert [(s.outcome, s.error_class) for s in fake.settled] == [("nack", "JobTimeout")] * 2
    assert reasons == ["timed out after 0.2s"]


def test_job_timeout_comes_from_the_envelope_when_the_handler_sets_none(
    envelopes: Envelopes, sock: Path
) -> None:
    app = App()

    @app.job("noop")
    def slow(ctx: JobContext, payload: dict[str, Any]) -> None:
        ctx.lease_lost.wait(10)

    fake = FakeLeaseKeeper([envelopes("noop", timeout_s=0.2)])
    with serving(fake, sock) as target, running_worker(app, target):
        wait_until(lambda: len(fake.settled) == 1)

    assert fake.settled[0].error_class == "JobTimeout"


def test_every_call_carries_the_token(envelopes: Envelopes, sock: Path) -> None:
    app = App()
    release = threading.Event()

    @app.job("noop")
    def handler(ctx: JobContext, payload: dict[str, Any]) -> None:
        release.wait(10)

    fake = FakeLeaseKeeper([envelopes()], lease_s=1, token="s3cret")
    with serving(fake, sock) as target, running_worker(app, target, token="s3cret"):
        wait_until(lambda: len(fake.heartbeats) >= 1)
        release.set()
        wait_until(lambda: len(fake.settled) == 1)

    assert fake.tokens_seen and set(fake.tokens_seen) == {"s3cret"}
    assert fake.settled[0].outcome == "ack"


def test_a_refused_token_stops_the_worker_with_the_reason(sock: Path) -> None:
    fake = FakeLeaseKeeper(token="s3cret")
    with (
        serving(fake, sock) as target,
        pytest.raises(LeaseKeeperRejected, match="UNAUTHENTICATED"),
        running_worker(App(), target, token="wrong") as rw,
    ):
        rw.thread.join(10)
        assert not rw.thread.is_alive()


def test_reconnects_to_a_leasekeeper_restarted_on_the_same_socket(
    envelopes: Envelopes, sock: Path
) -> None:
    app = App()

    @app.job("noop")
    def handler(ctx: JobContext, payload: dict[str, Any]) -> None:
        pass

    first = FakeLeaseKeeper([envelopes()])
    server = start_server(first, sock)
    try:
        with running_worker(app, f"unix:{sock}"):
            wait_until(lambda: len(first.outcomes("ack")) == 1)
            server.stop(0).wait()
            second = FakeLeaseKeeper([envelopes()])
            server = start_server(second, sock)
            wait_until(lambda: len(second.outcomes("ack")) == 1, what="an ack to the new server")
    finally:
        server.stop(0).wait()


def test_a_settle_waits_for_a_restarted_leasekeeper_instead_of_being_dropped(
    envelopes: Envelopes, sock: Path
) -> None:
    app = App()
    started = threading.Event()
    release = threading.Event()

    @app.job("noop")
    def handler(ctx: JobContext, payload: dict[str, Any]) -> None:
        started.set()
        release.wait(10)

    first = FakeLeaseKeeper([envelopes()])
    server = start_server(first, sock)
    try:
        with running_worker(app, f"unix:{sock}") as rw:
            assert started.wait(10)
            (lease_id,) = first.outstanding
            server.stop(0).wait()
            release.set()  # its ack cannot be delivered now: it is held, not dropped
            second = FakeLeaseKeeper([])
            server = start_server(second, sock)
            wait_until(
                lambda: [s.lease_id for s in second.outcomes("ack")] == [lease_id],
                what="the held ack to reach the restarted leasekeeper",
            )
            wait_until(lambda: rw.worker.in_hand == 0, what="the settled job to free its slot")
    finally:
        server.stop(0).wait()
    assert first.settled == []


def test_a_settle_is_dropped_after_the_retry_window() -> None:
    from tests.unit.test_worker_batcher import RecordingClient, _ack
    from workers.batcher import SettleBatcher

    client = RecordingClient(fail=True)
    answered: list[object] = []
    batcher: SettleBatcher[int] = SettleBatcher(
        client, lambda batch, results: answered.append(results), retry_window_s=0.2
    )
    batcher.start()
    batcher.put(_ack(1), 1)
    wait_until(lambda: answered == [None], what="the batch to be given up")
    assert len(client.batches) > 1  # it was retried before being dropped
    batcher.close(timeout=10)


def test_on_settled_reports_a_refused_settle(envelopes: Envelopes, sock: Path) -> None:
    app = App()
    confirmed: list[tuple[str, bool]] = []
    fake = FakeLeaseKeeper([envelopes()])

    @app.job("noop")
    def handler(ctx: JobContext, payload: dict[str, Any]) -> None:
        with fake.cond:  # another worker got the job meanwhile: our token is stale
            fake.outstanding[ctx.lease_id] = "newer-token"

    @app.on_settled
    def settled(ctx: JobContext, outcome: str, accepted: bool) -> None:
        confirmed.append((outcome, accepted))

    with serving(fake, sock) as target, running_worker(app, target):
        wait_until(lambda: confirmed != [])

    assert confirmed == [("ack", False)]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_prefetch_holds_twice_the_slots_and_runs_only_concurrency(
    envelopes: Envelopes, sock: Path, kind: str
) -> None:
    """The next jobs wait here, heartbeated, while no more than ``concurrency`` run."""
    app = App()
    gate = threading.Event()
    lock = threading.Lock()
    running = [0, 0]  # now, peak

    def enter() -> None:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])

    def leave() -> None:
        with lock:
            running[0] -= 1

    if kind == "sync":

        @app.job("noop")
        def slow(ctx: JobContext, payload: dict[str, Any]) -> None:
            enter()
            gate.wait(10)
            leave()
    else:

        @app.job("noop")
        async def slow_async(ctx: JobContext, payload: dict[str, Any]) -> None:
            enter()
            while not gate.is_set():
                await asyncio.sleep(0.005)
            leave()

    fake = FakeLeaseKeeper([envelopes() for _ in range(20)], lease_s=1)
    with (
        serving(fake, sock) as target,
        running_worker(app, target, concurrency=3, prefetch=2) as rw,
    ):
        wait_until(lambda: running[0] == 3 and rw.worker.in_hand == 6, what="3 run, 6 held")
        held = set(fake.outstanding)

        def beaten() -> set[str]:
            return {lease_id for batch in fake.heartbeats for lease_id, _ in batch}

        wait_until(lambda: held <= beaten(), what="every held job heartbeated")
        assert running[0] == 3
        gate.set()
        wait_until(lambda: len(fake.outcomes("ack")) == 20, what="20 acks")

    assert running[1] == 3
    assert fake.max_outstanding <= 6
    assert fake.claims[0] == 6, "the first claim fills every prefetch slot"


def test_stop_releases_prefetched_jobs_that_have_not_started(
    envelopes: Envelopes, sock: Path
) -> None:
    app = App()
    gate = threading.Event()
    started: list[str] = []

    @app.job("noop")
    def slow(ctx: JobContext, payload: dict[str, Any]) -> None:
        started.append(ctx.job_id)
        gate.wait(10)

    fake = FakeLeaseKeeper([envelopes() for _ in range(4)])
    with (
        serving(fake, sock) as target,
        running_worker(app, target, concurrency=1, prefetch=2) as rw,
    ):
        wait_until(lambda: len(started) == 1 and rw.worker.in_hand == 2, what="1 runs, 1 waits")
        threading.Thread(target=rw.worker.stop).start()
        wait_until(lambda: len(fake.outcomes("release")) == 1, what="the waiting job released")
        gate.set()
        wait_until(lambda: len(fake.outcomes("ack")) == 1, what="the running job acked")
    assert len(started) == 1


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_run_first_job_runs_before_the_prefetched_jobs_claimed_earlier(
    envelopes: Envelopes, sock: Path, kind: str
) -> None:
    """One slot, busy; a default job prefetched behind it; then a critical job
    (``run_first``) is claimed: it runs next, not after the prefetched one."""
    app = App()
    gate = threading.Event()
    order: list[int] = []

    if kind == "sync":

        @app.job("noop")
        def record(ctx: JobContext, payload: dict[str, Any]) -> None:
            order.append(payload["n"])
            if payload["n"] == 1:
                gate.wait(10)
    else:

        @app.job("noop")
        async def record_async(ctx: JobContext, payload: dict[str, Any]) -> None:
            order.append(payload["n"])
            while payload["n"] == 1 and not gate.is_set():
                await asyncio.sleep(0.005)

    fake = FakeLeaseKeeper([envelopes(payload={"n": 1}), envelopes(payload={"n": 2})])
    with (
        serving(fake, sock) as target,
        running_worker(app, target, concurrency=1, prefetch=3) as rw,
    ):
        wait_until(lambda: order == [1] and rw.worker.in_hand == 2, what="1 runs, 2 waits")
        critical = envelopes(payload={"n": 3})
        fake.run_first.add(critical)
        fake.add(critical)
        wait_until(lambda: rw.worker.in_hand == 3, what="the critical job claimed")
        gate.set()
        wait_until(lambda: len(fake.outcomes("ack")) == 3, what="3 acks")
    assert order == [1, 3, 2]


def test_a_settle_carries_every_lease_the_worker_can_hold(envelopes: Envelopes, sock: Path) -> None:
    """The default settle batch is concurrency x prefetch: the 8 jobs a 4-slot worker
    with prefetch 2 holds, all finished, may go in one Settle (a smaller cap splits
    them into two settles and two claims). Asserted on the worker's batcher, not end
    to end: on a loaded machine the claim loop may carry part of a batch on its
    combined call as soon as a slot is free, which says nothing of the cap, and the
    rest would then wait out whatever interval the test set."""
    assert settle_batch_for(4, 2) == 8 and settle_batch_for(64, 2) == 128
    client = LeaseKeeperClient(f"unix:{sock}", worker_id="test-worker")
    try:
        worker = Worker(App("test"), client, decoder=envelopes.codec, concurrency=4, prefetch=2)
        assert worker._batcher._max_batch == 8
    finally:
        client.close()


def test_a_worker_short_of_room_settles_at_the_usual_interval(
    envelopes: Envelopes, sock: Path
) -> None:
    """Acks wait for company (up to ``relaxed_settle_s``) only while half the leases
    are free. A worker of 2 x 2 leases that claimed 3 jobs has 1 free, short of the
    2 a claim wants: the slots its acks free are wanted, so the acks go at the usual
    interval (3 of the 4 a batch holds), not after the 60 s relaxed one."""
    fake = acked_noop_jobs(envelopes, sock, 3, concurrency=2, prefetch=2, relaxed_settle_s=60.0)
    assert fake.claims[0] == 4


def acked_noop_jobs(envelopes: Envelopes, sock: Path, jobs: int, **options: Any) -> FakeLeaseKeeper:
    """Run ``jobs`` no-op jobs through a worker built with ``options``; the fake
    leasekeeper once every one of them is acked (60 s at most: a guard against a hang)."""
    app = App("test")

    @app.job("noop")
    def noop(ctx: JobContext, payload: dict[str, Any]) -> None:
        pass

    fake = FakeLeaseKeeper([envelopes("noop", {"n": n}) for n in range(jobs)])
    with serving(fake, sock) as target, running_worker(app, target, **options):
        wait_until(lambda: len(fake.outcomes("ack")) == jobs, 60, what=f"{jobs} acks")
    return fake


@dataclass
class GatedRun:
    fake: FakeLeaseKeeper
    gates: dict[int, threading.Event]
    started: list[int]  # the ``n`` of each job, as its handler starts


@contextmanager
def gated_worker(
    envelopes: Envelopes, sock: Path, *, jobs: int, gated: int, **options: Any
) -> Iterator[GatedRun]:
    """A worker over ``jobs`` jobs ``{"n": n}``; jobs below ``gated`` wait for their
    gate. On the way out every gate opens and every job is acked."""
    run = GatedRun(
        fake=FakeLeaseKeeper([envelopes(payload={"n": n}) for n in range(jobs)]),
        gates={n: threading.Event() for n in range(gated)},
        started=[],
    )
    app = App("test")

    @app.job("noop")
    def gated_job(ctx: JobContext, payload: dict[str, Any]) -> None:
        run.started.append(payload["n"])
        gate = run.gates.get(payload["n"])
        if gate is not None:
            gate.wait(10)

    with serving(run.fake, sock) as target, running_worker(app, target, **options):
        yield run
        for gate in run.gates.values():
            gate.set()
        wait_until(lambda: len(run.fake.outcomes("ack")) == jobs, what=f"{jobs} acks")


def test_a_claim_gathers_freed_slots_while_jobs_wait_for_a_handler(
    envelopes: Envelopes, sock: Path
) -> None:
    """2 handlers, prefetch 3: 6 leases, 2 jobs running and 4 waiting. As jobs end one
    by one, a waiting job takes each handler, so no freed slot is claimed alone: the
    claim waits until half the leases (3) are free, and carries all 3. A claim after
    every settle answer would have asked for 1, 1 and 1."""
    with gated_worker(
        envelopes, sock, jobs=12, gated=6, concurrency=2, prefetch=3, claim_gather_s=60.0
    ) as run:
        wait_until(lambda: sorted(run.started) == [0, 1], what="jobs 0 and 1 run")
        for n in range(3):
            run.gates[n].set()
            expected = n + 3
            wait_until(lambda: len(run.started) == expected, what=f"a waiting job after job {n}")  # noqa: B023
        wait_until(lambda: len(run.fake.claims) == 2, what="the second claim")
        assert run.fake.claims == [6, 3]


def test_a_slot_whose_handler_would_go_idle_is_claimed_at_once(
    envelopes: Envelopes, sock: Path
) -> None:
    """Without prefetch no job waits in the worker for a handler: the slot a finished
    job frees is claimed at once however long a claim may gather (half would be 2)."""
    with gated_worker(
        envelopes, sock, jobs=6, gated=4, concurrency=4, prefetch=1, claim_gather_s=60.0
    ) as run:
        wait_until(lambda: sorted(run.started) == [0, 1, 2, 3], what="jobs 0-3 run")
        run.gates[0].set()
        wait_until(lambda: len(run.started) >= 5, what="a job claimed for the idle handler")
        assert run.fake.claims[:2] == [4, 1]


def test_a_gathering_claim_waits_no_longer_than_its_bound(envelopes: Envelopes, sock: Path) -> None:
    """A freed slot claimed alone once ``claim_gather_s`` passes, with a job still
    waiting in the worker: a job waiting in the leasekeeper (say, a critical one) is
    not held back until half the leases free."""
    with gated_worker(
        envelopes, sock, jobs=6, gated=4, concurrency=2, prefetch=2, claim_gather_s=0.05
    ) as run:
        wait_until(lambda: sorted(run.started) == [0, 1], what="jobs 0 and 1 run")
        run.gates[0].set()
        wait_until(lambda: len(run.fake.claims) == 2, what="the one freed slot claimed")
        assert run.fake.claims == [4, 1]
