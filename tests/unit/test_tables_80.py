"""Tables for people at 80 columns: ids whole on one line, offsets with no commit
as ``none``, retry tiers grouped under their queue, times as ISO and relative.

Real-length ids (32 hex characters, as the producer mints them) at the width of
a default terminal: a cut or wrapped id could not be pasted into ``dlq show``.
"""

from __future__ import annotations

import io
import uuid
from typing import Any

import click
import pytest
from rich.console import Console
from rich.table import Table

from leasekeeper.dlq import decode_entry
from leasekeeper.dlq.render import detail, entries_table, render_detail
from leasekeeper.views.inspect_view import job_lines, render_snapshot
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import AttemptError, DeadLetter, Job

CODEC = EnvelopeCodec(SchemaRegistry())
NOW_MS = 1_800_000_000_000


def at_80(render: Any) -> str:
    out = io.StringIO()
    render(Console(file=out, width=80, color_system=None))
    return out.getvalue()


def partition(topic: str, n: int, leases: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "topic": topic,
        "partition": n,
        "committed": -1001,
        "highest_fetched": -1,
        "unresolved": [],
        "unresolved_count": 0,
        "leases": leases or [],
    }


def lease(job_id: str) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "type": "send_receipt_email",
        "tenant": "tenant-with-a-long-name",
        "worker": "worker-host-1.example.internal:12345",
        "attempt": 2,
        "age_s": 3.25,
        "expires_in_s": 26.75,
    }


def snapshot(ids: list[str]) -> dict[str, Any]:
    tiers = [f"jobs.emails.retry.{t}" for t in ("1s", "10s", "1m", "10m", "1h", "1d")]
    parts = [partition("jobs.emails", 0, [lease(i) for i in ids])]
    parts += [partition(topic, n) for topic in tiers for n in (0, 1)]
    parts[-1]["unresolved_count"] = 1  # one tier holds something: every tier gets its row
    return {"queue": "emails", "member": "m", "ready": 0, "commits": 0,
            "partitions": parts, "counters": {}}  # fmt: skip


def test_inspect_at_80_columns_shows_whole_ids_none_and_tiers_by_queue() -> None:
    ids = [uuid.uuid4().hex for _ in range(3)]
    text = at_80(lambda c: render_snapshot(snapshot(ids), c, now_ms=NOW_MS))
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines)
    for job_id in ids:
        assert any(job_id in line for line in lines), job_id
    assert "-1001" not in text and " -1 " not in text
    assert "none" in text
    assert "jobs.emails.…" not in text
    tier_rows = [line for line in lines if "retry.1m" in line]
    assert len(tier_rows) == 1 and "2 parts" in tier_rows[0]


def test_inspect_wide_lists_every_tier_partition() -> None:
    text = at_80(lambda c: render_snapshot(snapshot([]), c, now_ms=NOW_MS, wide=True))
    assert len([line for line in text.splitlines() if "retry.1m" in line]) == 2


def dead(job_id: str) -> bytes:
    error = AttemptError(attempt=1, at_ms=NOW_MS, worker="w", error_class="SMTPError",
                         message="mailbox unavailable " * 5, traceback="")  # fmt: skip
    job = Job(job_id=job_id, queue="emails", tenant_id="acme", type="send_receipt_email",
              payload=b"", attempt=1, created_at_ms=NOW_MS, errors=(error,))  # fmt: skip
    return CODEC.encode_dead_letter(
        DeadLetter(
            envelope=CODEC.encode(job),
            raw_value=None,
            reason="permanent error",
            detail="d",
            source_topic="jobs.emails",
            source_partition=0,
            source_offset=0,
            died_at_ms=NOW_MS,
        )
    )


def test_dlq_list_at_80_columns_keeps_each_id_on_one_line() -> None:
    ids = [uuid.uuid4().hex for _ in range(3)]
    entries = [decode_entry(CODEC, 0, n, dead(i)) for n, i in enumerate(ids)]
    table: Table = entries_table(entries, title="jobs.emails.dlq")
    lines = at_80(lambda c: c.print(table)).splitlines()
    assert all(len(line) <= 80 for line in lines)
    for job_id in ids:
        assert any(job_id in line for line in lines), job_id


def test_dlq_show_takes_a_unique_prefix_of_eight_characters() -> None:
    from leasekeeper.dlq.cli import _entries_named

    # Fixed ninth and tenth characters, so the ten-character prefix is always unique.
    first, second = "0123abcd00" + uuid.uuid4().hex[10:], "0123abcd11" + uuid.uuid4().hex[10:]
    entries = [decode_entry(CODEC, 0, n, dead(i)) for n, i in enumerate((first, second))]
    (found,) = _entries_named(entries, first[:10])
    assert found.job is not None and found.job.job_id == first
    assert _entries_named(entries, "0:1")[0].offset == 1
    with pytest.raises(click.ClickException, match="matches 2 jobs"):
        _entries_named(entries, "0123abcd")
    with pytest.raises(click.ClickException, match="too short"):
        _entries_named(entries, "0123")


def test_inspect_job_shows_times_as_iso_and_relative_and_names_the_original() -> None:
    original = uuid.uuid4().hex
    view = {"job_id": uuid.uuid4().hex, "state": "skipped", "duplicate_of": original,
            "skipped_at_ms": NOW_MS - 12_000, "member_knows": True}  # fmt: skip
    lines = job_lines(view, NOW_MS)
    assert lines[0].endswith(f"skipped: duplicate of {original}")
    assert "  skipped_at: 2027-01-15T07:59:48Z (12 s ago)" in lines
    delayed = {"job_id": "j", "state": "delayed", "due_ms": NOW_MS + 20_000, "member_knows": True}
    assert job_lines(delayed, NOW_MS)[1] == "  due: 2027-01-15T08:00:20Z (in 20 s)"


def test_dlq_show_gives_times_in_iso_not_epoch_milliseconds() -> None:
    job_id = uuid.uuid4().hex
    record = detail(decode_entry(CODEC, 0, 0, dead(job_id)), CODEC)
    text = at_80(lambda c: render_detail(record, c))
    assert str(NOW_MS) not in text
    assert any(
        line.split()[1:3] == ["created_at", "2027-01-15T08:00:00Z"] for line in text.splitlines()
    )
    assert job_id in text
