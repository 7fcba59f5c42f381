"""WorkerSettlement batching: at most ``max_batch`` per call, everything flushed on close."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from schemas.lease_answer import LeaseAnswer
from workers.batcher import SettleBatcher
from workers.client import LeaseKeeperUnavailable
from workers.messages import LeaseRef, WorkerSettlement


class RecordingClient:
    def __init__(self, *, fail: bool = False) -> None:
        self.batches: list[list[WorkerSettlement]] = []
        self.fail = fail

    def settle(self, settlements: Sequence[WorkerSettlement], /) -> list[LeaseAnswer]:
        self.batches.append(list(settlements))
        if self.fail:
            raise LeaseKeeperUnavailable("gone", reconnecting=True)
        return [LeaseAnswer(lease_id=s.ref.lease_id, ok=True) for s in settlements]


def _ack(i: int) -> WorkerSettlement:
    return WorkerSettlement.ack(LeaseRef(lease_id=f"t/0/{i}", token="tok"))


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


class SteppedClock:
    """Time that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 0.0
        self.read = threading.Event()

    def __call__(self) -> float:
        self.read.set()
        return self.now

    def advance_once_read(self, to: float) -> None:
        """Move on once the batcher took the time its batch began."""
        assert self.read.wait(10)
        self.now = to


def test_with_room_a_batch_waits_for_company_until_hurried() -> None:
    """Past the usual interval, a worker with room lets the batch wait on (a Settle
    costs the same CPU whatever it carries): the next ack joins it, and ``hurry``
    (a claim left the worker short of room) sends both in one call."""
    client = RecordingClient()
    clock = SteppedClock()
    asked = threading.Event()

    def has_room() -> bool:
        asked.set()
        return True

    sent = threading.Event()
    batcher: SettleBatcher[int] = SettleBatcher(
        client, lambda batch, results: sent.set(), interval_s=0.001,
        relaxed=has_room, relaxed_interval_s=60.0, clock=clock,
    )  # fmt: skip
    batcher.start()
    batcher.put(_ack(1), 1)
    clock.advance_once_read(0.002)  # the usual interval is over
    assert asked.wait(10), "the batcher asks whether the worker has room"
    batcher.put(_ack(2), 2)
    assert client.batches == []  # still waiting for company
    batcher.hurry()
    assert sent.wait(10)
    assert [[s.ref.lease_id for s in b] for b in client.batches] == [["t/0/1", "t/0/2"]]
    batcher.close(timeout=10)


def test_without_room_a_batch_goes_at_the_usual_interval() -> None:
    client = RecordingClient()
    clock = SteppedClock()
    sent = threading.Event()
    batcher: SettleBatcher[int] = SettleBatcher(
        client, lambda batch, results: sent.set(), interval_s=0.001,
        relaxed=lambda: False, relaxed_interval_s=60.0, clock=clock,
    )  # fmt: skip
    batcher.start()
    batcher.put(_ack(1), 1)
    clock.advance_once_read(0.002)
    assert sent.wait(10), "sent at the usual interval, not after the relaxed one"
    assert [len(b) for b in client.batches] == [1]
    batcher.close(timeout=10)


class CountingCondition(threading.Condition):
    """A condition that counts its wake-up calls."""

    def __init__(self) -> None:
        super().__init__()
        self.notified = 0

    def notify_all(self) -> None:
        self.notified += 1
        super().notify_all()


def test_a_hurry_wakes_the_thread_only_when_the_batch_waits_on_the_relaxed_interval() -> None:
    """A worker short of room hurries after every claim; while the batch still waits out
    its usual interval, the flag is enough (the thread reads it when the wait ends), and
    waking the thread each time cost two thread switches per claim."""
    client = RecordingClient()
    clock = SteppedClock()
    sent = threading.Event()
    batcher: SettleBatcher[int] = SettleBatcher(
        client, lambda batch, results: sent.set(), interval_s=60.0,
        relaxed=lambda: True, relaxed_interval_s=120.0, clock=clock,
    )  # fmt: skip
    condition = batcher._cond = CountingCondition()
    batcher.start()
    batcher.put(_ack(1), 1)
    assert clock.read.wait(10), "the batch began: the thread waits out the usual interval"
    with condition:  # the thread holds it until it waits
        woken = condition.notified
    batcher.hurry()
    assert condition.notified == woken, "a hurry within the usual interval wakes no thread"
    assert client.batches == []
    batcher.close(timeout=10)
    assert sent.is_set()
    assert [len(b) for b in client.batches] == [1]


def test_a_taker_sends_what_waits_and_what_it_cannot_send_goes_back_first() -> None:
    """The claim loop takes the waiting settlements for its settle-and-claim call; a
    failed call gives them back, and the thread sends them ahead of later ones."""
    client = RecordingClient()
    answered: list[int] = []
    batcher: SettleBatcher[int] = SettleBatcher(
        client, lambda batch, results: answered.extend(tag for _, tag in batch), interval_s=60.0
    )
    for i in range(3):
        batcher.put(_ack(i), i)
    taken = batcher.take()
    assert [tag for _, tag in taken] == [0, 1, 2] and batcher.take() == []
    batcher.put(_ack(3), 3)
    batcher.give_back(taken)  # the combined call failed
    batcher.start()
    batcher.close(timeout=10)
    assert [[s.ref.lease_id for s in b] for b in client.batches] == [
        ["t/0/0", "t/0/1", "t/0/2", "t/0/3"]
    ]
    assert answered == [0, 1, 2, 3]
    assert batcher.take() == [], "nothing is taken once closing"


def test_a_taker_s_retry_later_answers_are_sent_again_by_the_thread() -> None:
    """A restarted leasekeeper answers "retry later" for leases it has not re-read:
    those go back to the thread, the rest are answered."""
    client = RecordingClient()
    answered: list[int] = []
    batcher: SettleBatcher[int] = SettleBatcher(
        client, lambda batch, results: answered.extend(tag for _, tag in batch), interval_s=60.0
    )
    batcher.put(_ack(0), 0)
    batcher.put(_ack(1), 1)
    taken = batcher.take()
    batcher.answered(
        taken,
        [
            LeaseAnswer(lease_id="t/0/0", ok=True),
            LeaseAnswer(lease_id="t/0/1", ok=False, retry_later=True),
        ],
    )
    assert answered == [0]
    batcher.start()
    batcher.close(timeout=10)
    assert [[s.ref.lease_id for s in b] for b in client.batches] == [["t/0/1"]]
    assert answered == [0, 1]
