"""One vocabulary: the words workers and leasekeepers exchange are the same objects."""

from __future__ import annotations

from leasekeeper.core import leases
from leasekeeper.core.retry_policy import DEFAULT_PERMANENT_ERRORS, RetryReason
from schemas import job
from schemas.vocabulary import DeadLetterReason, ErrorClass, SettleKind
from workers import Permanent, messages
from workers.errors import JOB_TIMEOUT, PAYLOAD_DECODE_ERROR, UNKNOWN_JOB_TYPE


def test_outcomes_and_dead_letter_reasons_are_defined_once() -> None:
    assert leases.SettleKind is SettleKind and messages.SettleKind is SettleKind
    assert job.DeadLetterReason is DeadLetterReason


def test_the_error_classes_workers_write_are_the_leasekeepers() -> None:
    assert Permanent.__qualname__ == ErrorClass.PERMANENT
    assert (UNKNOWN_JOB_TYPE, PAYLOAD_DECODE_ERROR, JOB_TIMEOUT) == (
        ErrorClass.UNKNOWN_JOB_TYPE,
        ErrorClass.PAYLOAD_DECODE_ERROR,
        ErrorClass.JOB_TIMEOUT,
    )
    assert ErrorClass.PERMANENT in DEFAULT_PERMANENT_ERRORS


def test_every_dead_end_of_the_retry_policy_is_a_dead_letter_reason() -> None:
    dead_ends = [r for r in RetryReason if r is not RetryReason.RETRY]
    assert all(DeadLetterReason(r.value) for r in dead_ends)
