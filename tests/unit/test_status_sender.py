"""The status sender's failure policy: a transient failure is sent again, any other
drops the record with a reason for the caller to count (no broker needed: the
producer connects lazily and nothing is produced here)."""

from __future__ import annotations

from typing import cast

from jobcore.kafka import KafkaError, KafkaSettings, Message
from leasekeeper.status_sender import RETRY_AFTER_S, StatusSender


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
