"""One job-state model (``jobcore.job_state``) and each reader's mapping onto it: the
status records (a skipped duplicate included, in a form older readers decode), the
producer's lookup, the dashboard's lookup and page, and ``inspect job``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jobcore.control import CancelledHow, DedupeClaim, JobEnd, JobStatus
from jobcore.job_state import (
    DASHBOARD_KNOWS,
    STATUS_TOPIC_KNOWS,
    JobReport,
    JobState,
    from_answer,
    from_inspect,
    from_status,
)
from jobcore.kafka import KafkaSettings
from jobcore.plain import plain
from leasekeeper.core.leases import SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.dashboard import job_lookup
from leasekeeper.dashboard.fleet_view import FleetState
from leasekeeper.dashboard.job_detail import job_at, job_section
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.views.finished import status_view
from producer import lookup as producer_lookup
from producer.status import CancelAnswer, CancelOutcome, ended
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import AttemptError, Job

SKIPPED = JobStatus(job_id="dup", state=JobEnd.CANCELLED, at_ms=5, attempt=0,
                    reason=CancelledHow.DUPLICATE.value, duplicate_of="orig")  # fmt: skip
DONE = JobStatus(job_id="ok", state=JobEnd.SUCCEEDED, at_ms=7, attempt=2, worker="w-1",
                 duration_s=0.5)  # fmt: skip
DEAD = JobStatus(job_id="d", state=JobEnd.DEAD, at_ms=1, attempt=3, reason="max_attempts",
                 last_error="E: x")  # fmt: skip
CANCELLED = JobStatus(job_id="c", state=JobEnd.CANCELLED, at_ms=1, attempt=0,
                      reason=CancelledHow.WAITING.value)  # fmt: skip


def test_a_skipped_duplicate_s_record_is_one_older_readers_decode() -> None:
    record = json.loads(SKIPPED.encode())
    # What every reader before this change does with a record: JobEnd(state), and
    # .get for the optional fields; the extra key is ignored.
    assert JobEnd(record["state"]) is JobEnd.CANCELLED
    assert (record["reason"], record["duplicate_of"]) == ("skipped as a duplicate", "orig")
    assert JobStatus.decode(SKIPPED.encode()) == SKIPPED


def test_records_without_a_duplicate_keep_their_bytes() -> None:
    assert b"duplicate_of" not in DONE.encode()
    assert JobStatus.decode(DONE.encode()).duplicate_of == ""


def test_the_engine_writes_a_status_record_for_a_skipped_duplicate(tmp_path: Path) -> None:
    now = 1_800_000_000.0
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(lease_s=10),
                         clock=lambda: now, monotonic=lambda: now)  # fmt: skip
    engine.control.remember(DedupeClaim(tenant_id="t1", dedupe_key="k", job_id="job-0",
                                        seen_at_ms=1_800_000_000_000))  # fmt: skip
    tp = TopicPart("jobs.q", 0)
    engine.partitions.assign(tp, 5)
    engine.fetch.offer(tp, 5, Job(job_id="job-5", queue="q", tenant_id="t1", type="noop",
                            payload=b"", created_at_ms=0, dedupe_key="k"), b"x")  # fmt: skip
    (status,) = engine.copies.take_statuses()
    assert (status.job_id, status.state, status.duplicate_of) == (
        "job-5",
        JobEnd.CANCELLED,
        "job-0",
    )
    assert from_status(status, source="s").state is JobState.SKIPPED


@pytest.mark.parametrize(
    ("status", "state"),
    [
        (DONE, JobState.SUCCEEDED),
        (SKIPPED, JobState.SKIPPED),
        (DEAD, JobState.DEAD),
        (CANCELLED, JobState.CANCELLED),
    ],
)
def test_a_status_record_maps_to_its_state(status: JobStatus, state: JobState) -> None:
    report = from_status(status, source="status topic t", queue="q")
    assert report.state is state and report.finished
    assert (report.job_id, report.attempt, report.at_ms) == (
        status.job_id,
        status.attempt,
        status.at_ms,
    )
    assert report.duplicate_of == (status.duplicate_of or None)


def test_a_report_given_its_state_as_text_holds_the_state() -> None:
    report = JobReport(state="leased", job_id="j", source="s")  # type: ignore[arg-type]
    assert report.state is JobState.LEASED and not report.finished


def test_inspect_views_map_to_the_shared_states() -> None:
    delayed = from_inspect({"job_id": "j", "state": "delayed", "due_ms": 99, "lease_id": "x/0/1",
                            "member_knows": True}, source="inspect")  # fmt: skip
    assert (delayed.state, delayed.until_ms) == (JobState.DELAYED, 99)
    leased = from_inspect({"job_id": "j", "state": "leased", "worker": "w", "attempt": 2,
                           "until_ms": 5}, source="inspect")  # fmt: skip
    assert (leased.state, leased.worker, leased.attempt, leased.until_ms) == (
        JobState.LEASED, "w", 2, None)  # fmt: skip
    skipped = from_inspect({"job_id": "j", "state": "skipped", "duplicate_of": "o",
                            "skipped_at_ms": 3}, source="inspect")  # fmt: skip
    assert (skipped.state, skipped.duplicate_of, skipped.at_ms) == (JobState.SKIPPED, "o", 3)
    assert from_inspect(status_view(SKIPPED), source="i").state is JobState.SKIPPED
    assert status_view(SKIPPED)["duplicate_of"] == "orig"
    for shown in ("unknown", "cancellation recorded"):
        assert from_inspect({"job_id": "j", "state": shown}, source="i").state is (
            JobState.NOT_FOUND
        )
    ambiguous = from_inspect({"job_id": "j", "state": "ambiguous", "problem": "2 jobs"}, source="i")
    assert (ambiguous.state, ambiguous.note) == (JobState.NOT_FOUND, "2 jobs")


def test_an_answer_with_a_state_this_version_does_not_know_is_not_misread() -> None:
    answer = from_answer({"job_id": "j", "state": "paused"}, source="api")
    assert answer.state is JobState.NOT_FOUND and "paused" in (answer.note or "")
    known = from_answer({"job_id": "j", "state": "skipped", "duplicate_of": "o", "at_ms": 4},
                        source="api")  # fmt: skip
    assert (known.state, known.duplicate_of, known.at_ms) == (JobState.SKIPPED, "o", 4)


def _ended_status(records: dict[str, JobStatus]) -> Any:
    """A status topic holding ``records``, as ``ended_status`` reads it."""

    def ended(_settings: object, _topic: str, job_id: str, **_: object) -> tuple[Any, None]:
        return records.get(job_id), None

    return ended


def test_the_producer_says_what_the_status_topic_cannot_know(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(producer_lookup, "ended_status", _ended_status({"dup": SKIPPED}))
    settings = KafkaSettings(bootstrap="x:1")
    waiting = producer_lookup.lookup(settings, "q", "waiting", prefix="jobs")
    assert (waiting.state, waiting.note) == (JobState.NOT_FOUND, STATUS_TOPIC_KNOWS)
    assert "--dashboard" in waiting.lines(str)[1] and "inspect job" in waiting.lines(str)[1]
    skipped = producer_lookup.lookup(settings, "q", "dup", prefix="jobs")
    assert (skipped.state, skipped.duplicate_of, skipped.finished) == ("skipped", "orig", True)
    assert "duplicate of orig" in skipped.lines(str)[0]


class _Actions:
    def __init__(self, records: dict[str, JobStatus]) -> None:
        self.records = records

    def topics(self, queue: str) -> Any:
        return type("T", (), {"status": f"jobs.{queue}.status"})

    def finished(self, queue: str, job_id: str) -> tuple[JobStatus | None, None]:
        return self.records.get(job_id), None

    def result(self, queue: str, job_id: str) -> str | None:
        return None


def test_the_dashboard_reports_skipped_jobs_and_names_who_knows_waiting_ones() -> None:
    actions: Any = _Actions({"dup": SKIPPED})
    skipped = job_lookup.lookup(actions, FleetState(), ["q"], "dup", 0)
    assert (skipped.state, skipped.duplicate_of) == (JobState.SKIPPED, "orig")
    assert json.loads(json.dumps(plain(skipped)))["state"] == "skipped"
    waiting = job_lookup.lookup(actions, FleetState(), ["q"], "waiting", 0)
    assert (waiting.state, waiting.note) == (JobState.NOT_FOUND, DASHBOARD_KNOWS)
    page = job_lookup.job_page("", "waiting", waiting)
    assert "leasekeeper inspect job ID" in page


def test_cancel_says_a_skipped_duplicate_already_ended() -> None:
    outcome = ended(SKIPPED)
    assert outcome is CancelOutcome.ALREADY_SKIPPED
    answer = CancelAnswer(job_id="dup", outcome=outcome, status=SKIPPED)
    assert answer.exit_code == 5
    assert (
        answer.message(str) == "not cancelled: job dup already skipped at 5 as a duplicate of orig"
    )


def test_the_job_page_shows_the_job_its_history_and_an_undecodable_payload_s_size() -> None:
    failed = AttemptError(attempt=1, at_ms=0, worker="w-9", error_class="ValueError",
                          message="bad input", traceback="")  # fmt: skip
    held = Job(job_id="j", queue="q", tenant_id="acme", type="nosuchtype", payload=b"abc",
               created_at_ms=0, attempt=1, errors=(failed,))  # fmt: skip
    shown = job_section(held, EnvelopeCodec(SchemaRegistry()))
    for fact in ("<td>nosuchtype</td>", "<td>acme</td>", "1970-01-01T00:00:00Z", "<td>w-9</td>",
                 "bad input", "3 bytes, not decoded here"):  # fmt: skip
        assert fact in shown
    assert "names no record" in job_section(job_at(KafkaSettings(bootstrap="x:1"),
                                                   EnvelopeCodec(SchemaRegistry()), "nope"),
                                            EnvelopeCodec(SchemaRegistry()))  # fmt: skip


def test_a_finished_job_s_status_record_names_the_record_it_last_ran_from(
    tmp_path: Path,
) -> None:
    """So the Job page can show a finished job itself (type, tenant, enqueue time,
    attempts, payload), not only how it ended; older readers ignore the field."""
    now = 1_800_000_000.0
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(lease_s=10),
                         clock=lambda: now, monotonic=lambda: now)  # fmt: skip
    tp = TopicPart("jobs.q", 0)
    engine.partitions.assign(tp, 5)
    engine.fetch.offer(tp, 5, Job(job_id="job-5", queue="q", tenant_id="t1", type="noop",
                            payload=b"", created_at_ms=0), b"x")  # fmt: skip
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    engine.workers.settle(
        [Settlement(lease_id=grant.lease_id, token=grant.token, outcome=SettleKind.ACK)]
    )
    (status,) = engine.copies.take_statuses()
    assert (status.state, status.record) == (JobEnd.SUCCEEDED, "jobs.q/0/5")
    again = JobStatus.decode(status.encode())
    assert again == status and from_status(again, source="s").record == "jobs.q/0/5"
    assert "record" not in json.loads(DONE.encode())  # none known: none written
