"""Settle and claim in one call: the slots a settle frees are refilled in its answer."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import pytest

from leasekeeper.core.leases import TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.rpc.server import LeaseKeeperServicer
from schemas import worker_pb2 as pb
from schemas.lease_answer import LeaseAnswer
from tests.unit.test_worker_support import (
    Envelopes,
    FakeLeaseKeeper,
    running_worker,
    serving,
    start_server,
    wait_until,
)
from workers.app import App
from workers.client import LeaseKeeperClient, LeaseKeeperUnavailable
from workers.context import JobContext
from workers.messages import ClaimedJob, LeaseRef, WorkerSettlement

JOBS = 200


@pytest.fixture
def envelopes() -> Envelopes:
    return Envelopes()


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "lk.sock"


def _noop_app() -> App:
    app = App()

    @app.job("noop")
    def noop(ctx: JobContext, payload: dict[str, Any]) -> None:
        pass

    return app


def _acked_once(fake: FakeLeaseKeeper) -> None:
    """The tests wait for at least ``JOBS`` acks, not exactly: an ack sent twice then
    fails here, named, where a count that skipped past ``JOBS`` waited out the timeout."""
    acks = Counter(s.lease_id for s in fake.outcomes("ack"))
    assert len(acks) == JOBS and set(acks.values()) == {1}, "every job acked, once"
    assert all(s.accepted for s in fake.outcomes("ack"))


def test_finished_jobs_are_settled_in_the_call_that_claims_their_replacements(
    envelopes: Envelopes, sock: Path
) -> None:
    fake = FakeLeaseKeeper([envelopes() for _ in range(JOBS)], then_claim=True)
    with (
        serving(fake, sock) as target,
        # The settle thread waits half a second: the claim loop's calls settle first
        # (it settles the last few jobs, once the process has room again).
        running_worker(_noop_app(), target, concurrency=4, prefetch=2, settle_interval_s=0.5),
    ):
        wait_until(lambda: len(fake.outcomes("ack")) >= JOBS, what=f"{JOBS} acks")

    _acked_once(fake)
    refilled = sum(got for _, got in fake.combined)
    assert refilled >= JOBS // 2, f"only {refilled} of {JOBS} jobs came in settle answers"
    assert all(asked <= 8 for asked, _ in fake.combined), "never past concurrency x prefetch"
    assert fake.max_outstanding <= 8


def test_a_leasekeeper_without_the_combined_call_is_claimed_from_as_before(
    envelopes: Envelopes, sock: Path
) -> None:
    fake = FakeLeaseKeeper([envelopes() for _ in range(JOBS)], then_claim=False)
    with (
        serving(fake, sock) as target,
        running_worker(_noop_app(), target, concurrency=4, prefetch=2, settle_interval_s=0.5),
    ):
        wait_until(lambda: len(fake.outcomes("ack")) >= JOBS, what=f"{JOBS} acks")

    _acked_once(fake)
    assert fake.combined == [] and len(fake.claims) >= JOBS // 8
    assert fake.max_outstanding <= 8


class FailingSettles(FakeLeaseKeeper):
    """Refuses the first few Settle calls as unavailable (a leasekeeper restarting)."""

    def __init__(self, *args: Any, failures: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failures = failures

    def Settle(self, request: pb.SettleRequest, context: grpc.ServicerContext) -> pb.SettleResponse:
        with self.cond:
            fail = self.failures > 0
            self.failures -= fail
        if fail:
            context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")
        return super().Settle(request, context)


def test_settlements_of_a_failed_combined_call_are_retried_not_lost(
    envelopes: Envelopes, sock: Path
) -> None:
    fake = FailingSettles([envelopes() for _ in range(JOBS)], then_claim=True, failures=3)
    with (
        serving(fake, sock) as target,
        running_worker(_noop_app(), target, concurrency=4, prefetch=2, settle_interval_s=0.05),
    ):
        wait_until(lambda: len(fake.outcomes("ack")) >= JOBS, 60, what=f"{JOBS} acks")

    assert fake.failures == 0, "the refused Settles all happened"
    _acked_once(fake)


class LostAnswer(LeaseKeeperServicer):
    """A real leasekeeper whose first Settle answer that brings jobs is lost on its way
    back (the connection reset after the grants were stored)."""

    def __init__(self, engine: LeaseEngine) -> None:
        super().__init__(engine, dict)
        self.lost: list[str] = []

    def Settle(self, request: pb.SettleRequest, context: grpc.ServicerContext) -> pb.SettleResponse:
        answer = super().Settle(request, context)
        if answer.jobs and not self.lost:
            self.lost = [j.job_id for j in answer.jobs]
            context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset")
        return answer


def test_a_settle_whose_answer_was_lost_is_sent_again_and_its_jobs_run_once(
    envelopes: Envelopes, sock: Path, tmp_path: Path
) -> None:
    """The worker resends the Settle under its id and gets the jobs the first answer
    leased: none waits out its lease, none runs twice, none is leased twice."""
    tp = TopicPart("jobs.q", 0)
    engine = LeaseEngine(store=LeaseStore(tmp_path / "state"), config=EngineConfig(lease_s=60))
    engine.partitions.assign(tp, 0)
    for offset in range(JOBS):
        value = envelopes()
        engine.fetch.offer(tp, offset, envelopes.codec.decode(value), value)
    leasekeeper = LostAnswer(engine)
    ran: Counter[str] = Counter()
    app = App()

    @app.job("noop")
    def noop(ctx: JobContext, payload: dict[str, Any]) -> None:
        ran[ctx.job_id] += 1

    server = start_server(leasekeeper, sock)  # type: ignore[arg-type]
    try:
        with running_worker(app, f"unix:{sock}", concurrency=4, prefetch=2,
                            settle_interval_s=0.5):  # fmt: skip
            wait_until(lambda: engine.counters.acked == JOBS, what=f"{JOBS} acks",
                       describe=lambda: f"ran {len(ran)}, "
                                        f"leased {engine.partitions.in_flight()}")  # fmt: skip
    finally:
        server.stop(0).wait()
        engine.close()

    assert leasekeeper.lost, "an answer with jobs was lost"
    assert set(ran) == {f"job-{n}" for n in range(1, JOBS + 1)}
    assert set(ran.values()) == {1}, "each job ran once"
    assert all(ran[job_id] == 1 for job_id in leasekeeper.lost)
    assert engine.counters.expired == 0 and engine.counters.released == 0


class SettleIds(FailingSettles):
    """Records the settle_id of every Settle, the refused ones too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ids: list[str] = []

    def Settle(self, request: pb.SettleRequest, context: grpc.ServicerContext) -> pb.SettleResponse:
        self.ids.append(request.settle_id)
        return super().Settle(request, context)


def test_a_lost_answer_is_asked_for_again_under_the_same_id_and_a_new_settle_gets_a_new_one(
    envelopes: Envelopes, sock: Path
) -> None:
    fake = SettleIds([envelopes() for _ in range(4)], then_claim=True, failures=2)
    with serving(fake, sock) as target, LeaseKeeperClient(target, worker_id="w") as client:
        _, first = client.settle_and_claim([], 2)
        _, second = client.settle_and_claim([], 2)
    assert len(first) == 2 and len(second) == 2
    assert len(fake.ids) == 4 and fake.ids[0] and len(set(fake.ids[:3])) == 1
    assert fake.ids[3] not in ("", fake.ids[0])


class StalledSettle(FakeLeaseKeeper):
    """Applies the first Settle, then holds its answer back until ``release``; every
    other Settle is refused as unavailable (the leasekeeper restarting meanwhile)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.applied = threading.Event()
        self.release = threading.Event()

    def Settle(self, request: pb.SettleRequest, context: grpc.ServicerContext) -> pb.SettleResponse:
        if self.applied.is_set():
            context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")
        answer = super().Settle(request, context)
        self.applied.set()
        self.release.wait(10)
        return answer


@pytest.mark.parametrize("combined", [True, False], ids=["settle-and-claim", "settle"])
def test_a_call_another_thread_saw_fail_still_gets_its_answer(
    envelopes: Envelopes, sock: Path, combined: bool
) -> None:
    """A Settle the leasekeeper applied keeps its answer when another thread's call on
    the same channel fails meanwhile: the failure does not cancel it, so its acks are
    not sent twice and the jobs its claim leased are not leased again and stranded."""
    fake = StalledSettle([envelopes() for _ in range(4)], then_claim=True)
    fake.outstanding["lease-1"] = "token-1"
    ack = WorkerSettlement.ack(LeaseRef(lease_id="lease-1", token="token-1"))
    answers: list[tuple[list[LeaseAnswer], list[ClaimedJob]]] = []
    failed: list[LeaseKeeperUnavailable] = []
    with serving(fake, sock) as target, LeaseKeeperClient(target, worker_id="w") as client:

        def stalled() -> None:
            try:
                if combined:
                    answers.append(client.settle_and_claim([ack], 2))
                else:
                    answers.append((client.settle([ack]), []))
            except LeaseKeeperUnavailable as exc:
                failed.append(exc)

        thread = threading.Thread(target=stalled)
        thread.start()
        assert fake.applied.wait(10)
        with pytest.raises(LeaseKeeperUnavailable):
            client.settle([])
        fake.release.set()
        thread.join(10)

    assert answers, f"the stalled call got no answer: {failed}"
    results, leases = answers[0]
    assert [(r.lease_id, r.ok) for r in results] == [("lease-1", True)]
    assert [s.lease_id for s in fake.settled] == ["lease-1"], "the ack was sent once"
    if combined:
        assert fake.combined == [(2, 2)], "the claim was made once"
        assert {lease.ref.lease_id for lease in leases} == set(fake.outstanding)


class RestartDuringCombined(FakeLeaseKeeper):
    """Applies the first combined Settle and holds its answer back until the plain
    Settle that came meanwhile, refused as unavailable, is sent again: the settle
    thread sees the leasekeeper restart, and has acted on it, while the claim loop's
    answer is on its way."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stalled = threading.Event()
        self.refused = threading.Event()
        self.sent_again = threading.Event()

    def Settle(self, request: pb.SettleRequest, context: grpc.ServicerContext) -> pb.SettleResponse:
        combined = request.HasField("then_claim")
        with self.cond:
            stall = combined and not self.stalled.is_set()
            if stall:
                self.stalled.set()
            refuse = not combined and self.stalled.is_set() and not self.refused.is_set()
            if not combined and not refuse and self.refused.is_set():
                self.sent_again.set()
            if refuse:
                self.refused.set()
        if refuse:
            context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")
        answer = super().Settle(request, context)
        if stall:
            self.sent_again.wait(10)
        return answer


def test_a_restart_the_settle_thread_sees_leaves_the_claim_loops_answer_alone(
    envelopes: Envelopes, sock: Path
) -> None:
    """Jobs 5 to 8 run only once the claim loop's combined Settle (of jobs 1 to 4) is
    under way, so their acks go in a plain Settle meanwhile, which is refused: every
    job is still acked once, and no lease is left in no worker's hands."""
    fake = RestartDuringCombined([envelopes() for _ in range(JOBS)], then_claim=True)
    app = App()

    @app.job("noop")
    def noop(ctx: JobContext, payload: dict[str, Any]) -> None:
        if payload["n"] > 4:
            fake.stalled.wait(10)

    with (
        serving(fake, sock) as target,
        # The settle thread waits half a second: the claim loop settles jobs 1 to 4.
        running_worker(app, target, concurrency=4, prefetch=2, settle_interval_s=0.5),
    ):
        wait_until(lambda: len(fake.outcomes("ack")) >= JOBS, 20, what=f"{JOBS} acks",
                   describe=lambda: f"leased, unsettled: {len(fake.outstanding)}")  # fmt: skip

    assert fake.sent_again.is_set(), "a plain Settle was refused while the combined one waited"
    _acked_once(fake)
    assert not fake.outstanding
