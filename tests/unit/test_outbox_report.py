"""The outbox relay's report to the dashboard: the record, the dashboard's state of
it, and the "Outbox relays" section of the overview."""

from __future__ import annotations

import json
import threading
from typing import Any

import psycopg
import pytest

from jobcore.plain import plain
from jobcore.relay_report import RelayReport
from leasekeeper.dashboard.relays_view import RelayState, human_duration, relays_section
from producer.outbox.relay import OutboxStats
from producer.outbox.report import RelayReporter, database_of

NOW = 1_700_000_000_000


def report(**changes: Any) -> RelayReport:
    fields: dict[str, Any] = {
        "instance": "host-a:41",
        "database": "db:5432/shop",
        "published_at_ms": NOW,
        "active": True,
        "relayed": 12,
        "waiting": 7,
        "lag_s": 95.0,
    }
    return RelayReport(**{**fields, **changes})


def encoded(r: RelayReport) -> bytes:
    return json.dumps(plain(r)).encode()


def test_a_report_round_trips_and_is_versioned() -> None:
    r = report()
    record = json.loads(encoded(r))
    assert record["version"] == 1 and record["waiting"] == 7 and record["lag_s"] == 95.0
    assert RelayReport.from_record(record) == r
    assert RelayReport.from_record({**record, "added_later": 1}) == r  # newer relay


def test_a_report_has_the_counts_or_an_error_never_both() -> None:
    with pytest.raises(ValueError):
        report(error="down")
    with pytest.raises(ValueError):
        report(waiting=None, lag_s=None)
    failed = report(waiting=None, lag_s=None, error="connection refused")
    assert plain(failed)["waiting"] is None


def test_the_database_is_named_without_its_password() -> None:
    dsn = "host=db.internal port=6432 dbname=shop user=app password=hunter2"
    assert database_of(dsn) == "db.internal:6432/shop"
    assert "hunter2" not in database_of("postgresql://app:hunter2@db/shop")


def test_state_keeps_the_latest_report_drops_tombstones_stale_and_unreadable_ones() -> None:
    state = RelayState(stale_after_s=30)
    state.apply("a", encoded(report(instance="a", waiting=1)))
    state.apply("a", encoded(report(instance="a", waiting=2)))
    state.apply("b", encoded(report(instance="b", published_at_ms=NOW - 31_000)))
    state.apply("c", encoded(report(instance="c")))
    state.apply("c", None)
    state.apply("d", b"not json")
    state.apply("e", json.dumps({"version": 0, "instance": "e"}).encode())
    assert [(r.instance, r.waiting) for r in state.current(NOW)] == [("a", 2)]


class FakeRelay:
    def __init__(self, waiting: int = 0, lag_s: float = 0.0) -> None:
        self.active = threading.Event()
        self.relayed = 3
        self._stats = OutboxStats(active=False, waiting=waiting, lag_s=lag_s, relayed=3)

    def stats(self, conn: psycopg.Connection[Any]) -> OutboxStats:
        return self._stats


def test_a_relay_that_cannot_reach_its_database_reports_the_error_not_zero() -> None:
    """Port 1 of loopback refuses at once: the report carries the reason, no counts."""
    dsn = "host=127.0.0.1 port=1 dbname=shop user=app password=hunter2 connect_timeout=5"
    reporter = RelayReporter(FakeRelay(), dsn, "host-a:41")
    record = reporter.record(NOW)
    reporter.close()
    assert record["waiting"] is None and record["lag_s"] is None
    assert record["error"] and "hunter2" not in json.dumps(record)
    assert record["database"] == "127.0.0.1:1/shop" and record["relayed"] == 3
    state = RelayState()
    state.apply("host-a:41", json.dumps(record).encode())
    page = relays_section(state.current(NOW), NOW)
    assert "cannot read the database" in page and ">0<" not in page


def test_the_section_shows_each_relay_its_role_backlog_and_lag() -> None:
    reports = [
        report(instance="a:1", waiting=7, lag_s=95.0, published_at_ms=NOW - 2_000),
        report(instance="b:2", active=False, waiting=0, lag_s=0.0),
    ]
    page = relays_section(reports, NOW)
    assert "Outbox relays" in page and "db:5432/shop" in page
    assert "<td>active</td>" in page and "<td>standby</td>" in page
    assert '<td class="n">7</td>' in page and "1 min 35 s" in page
    assert '<td class="n">0</td>' in page and "2.0 s ago" in page


def test_the_section_escapes_what_a_relay_reports_and_is_absent_without_relays() -> None:
    hostile = report(
        instance="<script>x</script>", database='db"/<b>', waiting=None, lag_s=None, error="<img>"
    )
    page = relays_section([hostile], NOW)
    assert "<script>" not in page and "<img" not in page and "<b>" not in page
    assert "&lt;script&gt;" in page and "&lt;img&gt;" in page
    assert relays_section([], NOW) == ""


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.25, "250 ms"),
        (4.2, "4.2 s"),
        (185, "3 min 5 s"),
        (7_800, "2 h 10 min"),
        (90_000, "1 d 1 h"),
    ],
)
def test_lag_reads_as_people_say_it(seconds: float, shown: str) -> None:
    assert human_duration(seconds) == shown
