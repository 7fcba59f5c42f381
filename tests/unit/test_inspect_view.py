"""The rich ``leasekeeper inspect`` view shows where retries wait and what the budget does.

A synthetic snapshot shaped like the engine's: no leasekeeper is needed, and
``now_ms`` is fixed so "due in N s" is exact.
"""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from leasekeeper.views.inspect_view import HELD_SHOWN, render_snapshot, retry_lines

NOW_MS = 1_800_000_000_000


def snapshot(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "queue": "emails",
        "member": "host-1",
        "ready": 3,
        "commits": 17,
        "partitions": [
            {
                "topic": "jobs.emails",
                "partition": 0,
                "committed": 10,
                "highest_fetched": 12,
                "unresolved": [10, 11],
                "unresolved_count": 2,
                "leases": [],
            }
        ],
        "counters": {"acked": 5, "nacked": 2},
        "in_flight_by_tenant": {},
    }
    return {**base, **fields}


BUDGET = {
    "share": 0.1,
    "window_s": 60.0,
    "first_attempts_in_window": 2000,
    "allowed_in_window": 200,
    "retries_in_window": 200,
    "retries_scheduled_ahead": 35,
    "retries_admitted": 480,
    "retries_deferred": 35,
    "longest_deferral_s": 12.3,
}


def rendered(snap: dict[str, Any]) -> str:
    out = io.StringIO()
    render_snapshot(snap, Console(file=out, width=250, color_system=None), now_ms=NOW_MS)
    return out.getvalue()


def test_the_view_shows_the_timer_the_held_tiers_and_the_budget() -> None:
    text = rendered(
        snapshot(
            delayed=4,
            next_delayed_due_ms=NOW_MS + 800,
            held_tiers={
                "jobs.emails.retry.10s/1": NOW_MS + 7_500,
                "jobs.emails.retry.1s/0": NOW_MS + 300,
            },
            retry_budget=BUDGET,
        )
    )
    assert "delayed 4 jobs waiting on the timer (next due in 0.8s)" in text
    # Soonest first: the partition about to move is the one to look at.
    assert (
        "held tier partitions 2: jobs.emails.retry.1s/0 in 0.3s, jobs.emails.retry.10s/1 in 7.5s"
        in text
    )
    assert (
        "retry budget 10% of first attempts over 60s: first attempts 2000, allowed 200, "
        "retries 200, scheduled ahead 35; since start admitted 480, deferred 35 (longest 12.3s)"
        in text
    )
    assert "jobs.emails" in text  # the partitions table is still there


def test_nothing_waiting_reads_as_such() -> None:
    lines = retry_lines(
        snapshot(delayed=0, next_delayed_due_ms=None, held_tiers={}, retry_budget=BUDGET), NOW_MS
    )
    assert lines[0] == "[bold]delayed[/] 0 jobs waiting on the timer"
    assert lines[1] == "[bold]held tier partitions[/] 0"


def test_a_due_time_in_the_past_is_now() -> None:
    lines = retry_lines(snapshot(delayed=1, next_delayed_due_ms=NOW_MS - 50), NOW_MS)
    assert lines == ["[bold]delayed[/] 1 jobs waiting on the timer (next due now)"]


def test_many_held_partitions_are_cut_to_the_soonest() -> None:
    held = {f"jobs.emails.retry.1m/{p}": NOW_MS + 1_000 * (p + 1) for p in range(12)}
    (line,) = retry_lines(snapshot(held_tiers=held), NOW_MS)
    assert line.startswith("[bold]held tier partitions[/] 12: jobs.emails.retry.1m/0 in 1.0s")
    assert line.count("jobs.emails.retry.1m/") == HELD_SHOWN
    assert line.endswith("… (12)")


def test_a_snapshot_without_the_retry_fields_renders_as_before() -> None:
    """An older leasekeeper sends none of them: no section, no error."""
    assert retry_lines(snapshot(), NOW_MS) == []
    text = rendered(snapshot())
    assert "retry budget" not in text
    assert "acked 5  nacked 2" in text
