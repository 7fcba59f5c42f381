"""One line per row at 80 columns, and retry tiers as a path: shortest delay first,
one row for them all while they are empty (``inspect``, ``dlq list``, dashboard).

A row folded letter by letter over eight lines cannot be scanned; a screen of
zero-backlog tiers in name order (``10m`` before ``1d`` before ``1h``) hides the
one that is not zero.
"""

from __future__ import annotations

import io
import uuid
from typing import Any

from rich.console import Console

from leasekeeper.dashboard.fleet_view import FleetState
from leasekeeper.dashboard.kafka_view import QueueOffsets
from leasekeeper.dashboard.pages import queue_page, scheduled_page
from leasekeeper.dlq import decode_entry
from leasekeeper.dlq.render import entries_table
from leasekeeper.views.inspect_view import render_snapshot
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import AttemptError, DeadLetter, Job

CODEC = EnvelopeCodec(SchemaRegistry())
NOW_MS = 1_800_000_000_000
# Name order, which is not delay order.
TIERS = ("10m", "10s", "1d", "1h", "1m", "1s")
BY_DELAY = ("1s", "10s", "1m", "10m", "1h", "1d")


def at_80(render: Any) -> list[str]:
    out = io.StringIO()
    render(Console(file=out, width=80, color_system=None))
    return out.getvalue().splitlines()


def rows_under(lines: list[str], title: str) -> list[str]:
    """The body lines of the table titled ``title``: after its header rule, up to a
    blank line or the next table's title."""
    start = next(n for n, line in enumerate(lines) if line.strip() == title)
    rule = next(n for n in range(start, len(lines)) if lines[n].startswith("───"))
    body = []
    for line in lines[rule + 1 :]:
        if not line.strip() or line.strip() in ("leases in flight", "partitions"):
            break
        body.append(line)
    return body


def dead(job_id: str) -> bytes:
    error = AttemptError(attempt=3, at_ms=NOW_MS, worker="worker-host-1.example.internal:1",
                         error_class="SMTPRecipientsRefused",
                         message="mailbox unavailable " * 5, traceback="")  # fmt: skip
    job = Job(job_id=job_id, queue="emails", tenant_id="tenant-with-a-long-name",
              type="send_receipt_email_with_attachments", payload=b"", attempt=3,
              created_at_ms=NOW_MS, errors=(error,))  # fmt: skip
    letter = DeadLetter(envelope=CODEC.encode(job), raw_value=None, reason="max attempts",
                        detail="d", source_topic="jobs.emails", source_partition=0,
                        source_offset=0, died_at_ms=NOW_MS)  # fmt: skip
    return CODEC.encode_dead_letter(letter)


def test_dlq_list_at_80_columns_is_one_line_per_entry_cut_with_an_ellipsis() -> None:
    ids = [uuid.uuid4().hex for _ in range(3)]
    entries = [decode_entry(CODEC, 0, n, dead(i)) for n, i in enumerate(ids)]
    lines = at_80(lambda c: c.print(entries_table(entries, title="jobs.emails.dlq")))
    body = rows_under(lines, "jobs.emails.dlq")
    assert len(body) == len(ids)
    for job_id, line in zip(ids, body, strict=True):
        assert job_id in line and "…" in line and len(line) <= 80


def test_dlq_list_wide_shows_more_of_each_entry() -> None:
    ids = [uuid.uuid4().hex]
    entries = [decode_entry(CODEC, 0, 0, dead(ids[0]))]
    out = io.StringIO()
    Console(file=out, width=200).print(entries_table(entries, title="t", wide=True))
    text = out.getvalue()
    assert "tenant-with-a-long-name" in text and "SMTPRecipientsRefused: mailbox" in text


def lease(job_id: str) -> dict[str, Any]:
    return {"job_id": job_id, "type": "send_receipt_email_with_attachments",
            "tenant": "tenant-with-a-long-name", "worker": "worker-host-1.example.internal:1",
            "attempt": 2, "age_s": 3.25, "expires_in_s": 26.75}  # fmt: skip


def partition(topic: str, n: int, held: int = 0, leases: list[Any] | None = None) -> Any:
    return {"topic": topic, "partition": n, "committed": 5, "highest_fetched": 9,
            "unresolved": list(range(held)), "unresolved_count": held,
            "leases": leases or []}  # fmt: skip


def snapshot(ids: list[str], held_in: str | None = None) -> dict[str, Any]:
    parts = [partition("jobs.emails", 0, leases=[lease(i) for i in ids])]
    for tier in TIERS:
        parts += [partition(f"jobs.emails.retry.{tier}", n, 2 if tier == held_in else 0)
                  for n in (0, 1)]  # fmt: skip
    return {"queue": "emails", "member": "m", "ready": 0, "commits": 0,
            "partitions": parts, "counters": {}}  # fmt: skip


def test_inspect_leases_at_80_columns_are_one_line_each() -> None:
    ids = [uuid.uuid4().hex for _ in range(3)]
    lines = at_80(lambda c: render_snapshot(snapshot(ids), c, now_ms=NOW_MS))
    body = rows_under(lines, "leases in flight")
    assert len(body) == len(ids)
    assert all(any(i in line for i in ids) and len(line) <= 80 for line in body)


def test_inspect_lists_tiers_by_delay_and_one_row_while_all_are_empty() -> None:
    lines = at_80(lambda c: render_snapshot(snapshot([], held_in="1h"), c, now_ms=NOW_MS))
    shown = [t for line in lines for t in BY_DELAY if line.strip().startswith(f"retry.{t} ")]
    assert tuple(shown) == BY_DELAY
    empty = at_80(lambda c: render_snapshot(snapshot([]), c, now_ms=NOW_MS))
    assert not any("retry." in line for line in empty)
    (row,) = [line for line in empty if "tiers" in line]
    assert "6 tiers, empty (1s-1d)" in row and "12 parts" in row


class Kafka:
    """The dashboard's view of Kafka, with one queue's tier backlogs."""

    def __init__(self, tiers: dict[str, int]) -> None:
        self.tiers = tiers

    def offsets(self, queue: str) -> QueueOffsets:
        return QueueOffsets(queue=queue, ready=(), tiers=self.tiers, dlq_depth=0,
                            oldest_ready_ms=None)  # fmt: skip

    def many(self, queues: list[str]) -> dict[str, QueueOffsets]:
        return {q: self.offsets(q) for q in queues}

    def cron(self) -> list[Any]:
        return []


def test_the_dashboard_lists_tiers_by_delay_and_one_row_while_all_are_empty() -> None:
    backlog = {f"jobs.emails.retry.{t}": (4 if t == "1h" else 0) for t in TIERS}
    html = queue_page("/", "emails", FleetState(), Kafka(backlog), NOW_MS)  # type: ignore[arg-type]
    places = [html.index(f"jobs.emails.retry.{t}<") for t in BY_DELAY]
    assert places == sorted(places)
    idle = {topic: 0 for topic in backlog}
    html = queue_page("/", "emails", FleetState(), Kafka(idle), NOW_MS)  # type: ignore[arg-type]
    assert "retry.1s" not in html and "6 tiers, empty (1s-1d)" in html
    fleet = FleetState()
    fleet.queues = lambda now_ms: ["emails"]  # type: ignore[method-assign]
    html = scheduled_page("/", fleet, Kafka(idle), NOW_MS)  # type: ignore[arg-type]
    assert "retry.1s" not in html and "6 tiers, empty (1s-1d)" in html
