"""The leasekeeper's log lines for people: rate-limited retries and dead letters,
and assignments as ranges."""

from __future__ import annotations

from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.log_lines import RateLimit, copy_line, partitions_line
from schemas.job import AttemptError, Job


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_storm_costs_a_few_lines_and_the_next_says_how_many_were_held() -> None:
    clock = Clock()
    limit = RateLimit(per_window=3, window_s=60, clock=clock)
    shown = [limit.allow().log for _ in range(10)]
    assert shown == [True, True, True] + [False] * 7
    clock.now = 60
    first = limit.allow()
    assert first.log and first.suppressed == 7
    assert limit.allow().suppressed == 0


def _job(attempt: int) -> Job:
    error = AttemptError(attempt=attempt, at_ms=0, worker="w", error_class="SMTPError",
                         message="421 try later", traceback="")  # fmt: skip
    return Job(job_id="j1", queue="emails", tenant_id="acme", type="send_receipt", payload=b"",
               created_at_ms=0, attempt=attempt, max_attempts=8, errors=(error,))  # fmt: skip


def _request(kind: CopyKind, **extra: object) -> CopyRequest:
    return CopyRequest(kind=kind, source=TopicPart("jobs.emails", 0), offset=7, generation=1,
                       **extra)  # type: ignore[arg-type]  # fmt: skip


def test_a_retry_and_a_dead_letter_read_as_sentences() -> None:
    retry = copy_line(_request(CopyKind.RETRY, job=_job(2), delay_s=3.25), "jobs.emails.retry.10s")
    assert retry == (
        "retrying job j1 (send_receipt, tenant acme) after attempt 2 of 8 in 3.2s via "
        "jobs.emails.retry.10s: SMTPError: 421 try later"
    )
    dead = copy_line(
        _request(CopyKind.DEAD, job=_job(8), reason="attempts exhausted"), "jobs.emails.dlq"
    )
    assert dead == (
        "dead-lettered job j1 (send_receipt, tenant acme) to jobs.emails.dlq: attempts "
        "exhausted; last error SMTPError: 421 try later"
    )
    assert copy_line(_request(CopyKind.HOP, job=_job(1), tier="1m"), "t") is None


def test_assigned_partitions_are_one_short_line() -> None:
    pairs = [("jobs.emails", p) for p in (3, 0, 1, 2)] + [("jobs.emails.retry.1s", 0),
                                                           ("jobs.emails.retry.1s", 2)]  # fmt: skip
    assert partitions_line(pairs) == "6 partitions: jobs.emails 0-3, jobs.emails.retry.1s 0,2"
    assert partitions_line([]) == "0 partitions"
