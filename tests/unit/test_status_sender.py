"""The status sender's failure policy: a transient failure is sent again, any other
drops the record with a reason for the caller to count (no broker needed: the
producer connects lazily and nothing is produced here)."""

from __future__ import annotations

from typing import cast

from jobcore.control import JobEnd, JobStatus
from jobcore.kafka import KafkaError, KafkaSettings, Message
from leasekeeper.kafka.status_sender import RETRY_AFTER_S, StatusSender


class _Message:
    def key(self) -> bytes:
        return b"job-1"

    def value(self) -> bytes:
        return b"{}"


def test_a_transient_failure_is_sent_again_and_a_refusal_is_dropped() -> None:
    dropped: list[str] = []
    now = [100.0]
    sender = StatusSender(KafkaSettings(bootstrap="127.0.0.1:9", client_id="t"), "jobs.q.status",
                          on_dropped=dropped.append, clock=lambda: now[0])  # fmt: skip
    message = cast(Message, _Message())
    sender._reported(None, message)  # a success: never reported, ignored if it were
    sender._reported(KafkaError(KafkaError._MSG_TIMED_OUT), message)
    assert dropped == [] and len(sender._waiting) == 1
    sender._reported(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), message)
    assert len(dropped) == 1 and "jobs.q.status" in dropped[0]
    assert sender._waiting[0].due == 100.0 + RETRY_AFTER_S


class _FullAfter:
    """A producer whose local queue takes ``room`` records, then is full."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.produced: list[bytes] = []

    def produce(self, topic: str, key: bytes, value: bytes) -> None:
        if len(self.produced) >= self.room:
            raise BufferError("Local: Queue full")
        self.produced.append(key)

    def poll(self, timeout: float) -> int:
        return 0

    def __len__(self) -> int:
        return 0


def _statuses(*ids: str) -> list[JobStatus]:
    return [JobStatus(job_id=i, state=JobEnd.SUCCEEDED, at_ms=1, attempt=1) for i in ids]


def test_a_full_local_queue_keeps_the_rest_in_order_for_the_next_pump() -> None:
    sender = StatusSender(KafkaSettings(bootstrap="127.0.0.1:9", client_id="t"), "jobs.q.status",
                          on_dropped=lambda reason: None)  # fmt: skip
    full = _FullAfter(room=2)
    sender._producer = full
    sender.send(_statuses("a", "b", "c", "d"))
    assert full.produced == [b"a", b"b"] and sender.waiting == 2
    sender.send(_statuses("e"))  # behind the waiting ones, never ahead of them
    assert full.produced == [b"a", b"b"] and sender.waiting == 3
    full.room = 10
    sender.send([])
    assert full.produced == [b"a", b"b", b"c", b"d", b"e"] and sender.waiting == 0


class _Refusing(_FullAfter):
    """A producer whose every record fails later with a transient error."""

    def __init__(self, sender: StatusSender) -> None:
        super().__init__(room=10**9)
        self.sender = sender

    def poll(self, timeout: float) -> int:
        for _ in self.produced:
            self.sender._reported(KafkaError(KafkaError._MSG_TIMED_OUT), cast(Message, _Message()))
        self.produced.clear()
        return 0


def test_records_waiting_while_only_the_status_topic_is_down_are_capped_and_counted() -> None:
    dropped: list[str] = []
    sender = StatusSender(KafkaSettings(bootstrap="127.0.0.1:9", client_id="t"), "jobs.q.status",
                          on_dropped=dropped.append, clock=lambda: 0.0, max_waiting=50)  # fmt: skip
    sender._producer = _Refusing(sender)
    for batch in range(200):
        sender.send(_statuses(*(f"j{batch}-{i}" for i in range(10))))
    assert sender.waiting == 50
    assert len(dropped) == 2000 - 50 and all("overflow" in reason for reason in dropped)
