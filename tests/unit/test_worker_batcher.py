"""Settlement batching: at most ``max_batch`` per call, everything flushed on close."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from workers.batcher import SettleBatcher
from workers.client import LeaseKeeperUnavailable
from workers.messages import ClaimAsk, Lease, LeaseRef, LeaseResult, Settlement


class RecordingClient:
    def __init__(self, *, fail: bool = False) -> None:
        self.batches: list[list[Settlement]] = []
        self.fail = fail

    def settle(self, settlements: Sequence[Settlement], /) -> list[LeaseResult]:
        self.batches.append(list(settlements))
        if self.fail:
            raise LeaseKeeperUnavailable("gone", reconnecting=True)
        return [LeaseResult(lease_id=s.ref.lease_id, ok=True) for s in settlements]


def _ack(i: int) -> Settlement:
    return Settlement.ack(LeaseRef(lease_id=f"t/0/{i}", token="tok"))


def test_a_backlog_is_sent_in_batches_of_at_most_max_batch() -> None:
    client = RecordingClient()
    answered: list[tuple[int, bool]] = []
    batcher: SettleBatcher[int] = SettleBatcher(
        client,
        lambda batch, results: answered.extend((tag, results is not None) for _, tag in batch),
        max_batch=100,
    )
    for i in range(250):
        batcher.put(_ack(i), i)
    batcher.start()
    batcher.close(timeout=10)

    assert [len(b) for b in client.batches] == [100, 100, 50]
    assert answered == [(i, True) for i in range(250)]


def test_close_flushes_what_is_queued() -> None:
    client = RecordingClient()
    done = threading.Event()
    batcher: SettleBatcher[int] = SettleBatcher(
        client, lambda batch, results: done.set(), interval_s=60.0
    )
    batcher.start()
    batcher.put(_ack(1), 1)
    batcher.close(timeout=10)  # does not wait out the 60 s window
    assert done.is_set()
    assert [len(b) for b in client.batches] == [1]


def test_a_failed_call_drops_the_batch_and_reports_no_results() -> None:
    client = RecordingClient(fail=True)
    answered: list[object] = []
    batcher: SettleBatcher[int] = SettleBatcher(
        client, lambda batch, results: answered.append(results)
    )
    batcher.put(_ack(1), 1)
    batcher.start()
    batcher.close(timeout=10)
    assert answered == [None]


def _lease(i: int) -> Lease:
    return Lease(
        ref=LeaseRef(lease_id=f"t/1/{i}", token="tok"), until_ms=0, attempt=1, envelope=b"",
        lease_s=30,
    )  # fmt: skip


class ClaimingClient(RecordingClient):
    """Answers a settle's claim with up to ``available`` jobs; fails the first
    ``failures`` calls as an unreachable leasekeeper."""

    def __init__(self, *, available: int = 10, failures: int = 0) -> None:
        super().__init__()
        self.available = available
        self.failures = failures
        self.asks: list[ClaimAsk | None] = []

    def settle_and_claim(
        self, settlements: Sequence[Settlement], ask: ClaimAsk | None, /
    ) -> tuple[list[LeaseResult], list[Lease]]:
        self.asks.append(ask)
        self.batches.append(list(settlements))
        if self.failures:
            self.failures -= 1
            raise LeaseKeeperUnavailable("gone", reconnecting=True)
        got = 0 if ask is None else min(ask.max_jobs, self.available)
        self.available -= got
        results = [LeaseResult(lease_id=s.ref.lease_id, ok=True) for s in settlements]
        return results, [_lease(i) for i in range(got)]


class Hook:
    """Asks for one job per settled job and records the order of events."""

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.claimed_calls: list[tuple[ClaimAsk, list[Lease]]] = []
        self.done = threading.Event()

    def ask(self, batch: Sequence[tuple[Settlement, int]], /) -> ClaimAsk | None:
        self.events.append(f"ask {len(batch)}")
        return ClaimAsk(max_jobs=len(batch))

    def claimed(self, ask: ClaimAsk, leases: list[Lease], /) -> None:
        self.events.append(f"claimed {len(leases)}")
        self.claimed_calls.append((ask, leases))
        self.done.set()


def test_a_settle_claims_the_settled_jobs_places_in_the_same_call() -> None:
    client = ClaimingClient(available=2)
    events: list[str] = []
    hook = Hook(events)
    batcher: SettleBatcher[int] = SettleBatcher(
        client, lambda batch, results: events.append(f"answered {len(batch)}"), claim=hook
    )
    for i in range(3):
        batcher.put(_ack(i), i)
    batcher.start()
    assert hook.done.wait(10)
    batcher.close(timeout=10)

    assert client.asks == [ClaimAsk(max_jobs=3)]  # one call: the settle and its claim
    # The settled jobs' slots are freed (answered) before the claimed jobs are taken.
    assert events == ["ask 3", "answered 3", "claimed 2"]
    assert [lease.ref.lease_id for lease in hook.claimed_calls[0][1]] == ["t/1/0", "t/1/1"]


def test_a_retried_settle_does_not_claim_again_and_gives_the_reservation_back() -> None:
    client = ClaimingClient(failures=1)  # the first call's answer is lost
    events: list[str] = []
    hook = Hook(events)
    batcher: SettleBatcher[int] = SettleBatcher(client, lambda batch, results: None, claim=hook)
    batcher.put(_ack(1), 1)
    batcher.start()
    assert hook.done.wait(10)
    batcher.close(timeout=10)

    # The lost call may have handed out jobs (their leases expire); the retry only settles.
    assert client.asks == [ClaimAsk(max_jobs=1)]
    assert len(client.batches) == 2  # the retry was a plain settle
    assert [(ask.max_jobs, leases) for ask, leases in hook.claimed_calls] == [(1, [])]


def test_a_settle_that_fails_for_good_gives_the_reservation_back() -> None:
    client = ClaimingClient(failures=1_000)
    hook = Hook([])
    answered: list[object] = []
    batcher: SettleBatcher[int] = SettleBatcher(
        client, lambda batch, results: answered.append(results), claim=hook, retry_window_s=0.0
    )
    batcher.put(_ack(1), 1)
    batcher.start()
    assert hook.done.wait(10)
    batcher.close(timeout=10)
    assert answered == [None]
    assert [(ask.max_jobs, leases) for ask, leases in hook.claimed_calls] == [(1, [])]
