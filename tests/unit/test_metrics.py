"""The Prometheus collector turns one engine snapshot into samples, retry path included.

Read back through ``generate_latest`` on a registry of its own: exactly what a
scrape of ``/metrics`` returns, without a leasekeeper or a port.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from leasekeeper.views.metrics import COUNTERS, EngineCollector


def snapshot(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "ready": 7,
        "partitions": [
            {
                "topic": "jobs.emails",
                "partition": 2,
                "committed": 100,
                "highest_fetched": 104,
                "unresolved_count": 3,
                "leases": [{}, {}],
            }
        ],
        "counters": dict.fromkeys(COUNTERS, 0) | {"acked": 42, "retried": 9},
    }
    return {**base, **fields}


def scrape(snap: dict[str, Any]) -> str:
    registry = CollectorRegistry()
    registry.register(EngineCollector(lambda: snap, "emails"))
    return generate_latest(registry).decode()


RETRY_FIELDS: dict[str, Any] = {
    "retry_budget": {
        "share": 0.1,
        "window_s": 60.0,
        "first_attempts_in_window": 3000,
        "allowed_in_window": 300,
        "retries_in_window": 287,
        "retries_scheduled_ahead": 4,
        "retries_admitted": 1200,
        "retries_deferred": 56,
        "longest_deferral_s": 3.5,
    },
    "delayed": 12,
    "next_delayed_due_ms": 1_800_000_000_500,
    "held_tiers": {"jobs.emails.retry.1s/0": 1_800_000_000_900, "jobs.emails.retry.1m/3": 0},
}


def test_the_retry_budget_the_timer_and_held_tiers_are_exported() -> None:
    text = scrape(snapshot(**RETRY_FIELDS))
    assert 'leasekeeper_retry_budget_allowed{queue="emails"} 300.0' in text
    assert 'leasekeeper_retry_budget_retries_in_window{queue="emails"} 287.0' in text
    assert "# TYPE leasekeeper_retry_budget_retries_deferred_total counter" in text
    assert 'leasekeeper_retry_budget_retries_deferred_total{queue="emails"} 56.0' in text
    assert 'leasekeeper_delayed_jobs{queue="emails"} 12.0' in text
    assert 'leasekeeper_held_tier_partitions{queue="emails"} 2.0' in text


def test_the_existing_families_are_unchanged() -> None:
    text = scrape(snapshot(**RETRY_FIELDS))
    assert 'leasekeeper_acked_total{queue="emails"} 42.0' in text
    assert 'leasekeeper_retried_total{queue="emails"} 9.0' in text
    assert 'leasekeeper_ready_jobs{queue="emails"} 7.0' in text
    labels = '{partition="2",queue="emails",topic="jobs.emails"}'
    assert f"leasekeeper_leases_in_flight{labels} 2.0" in text
    assert f"leasekeeper_unresolved_offsets{labels} 3.0" in text
    assert f"leasekeeper_commit_gap{labels} 5.0" in text


def test_nothing_waiting_is_a_zero_not_a_missing_series() -> None:
    idle = {
        **RETRY_FIELDS,
        "delayed": 0,
        "next_delayed_due_ms": None,
        "held_tiers": {},
    }
    text = scrape(snapshot(**idle))
    assert 'leasekeeper_delayed_jobs{queue="emails"} 0.0' in text
    assert 'leasekeeper_held_tier_partitions{queue="emails"} 0.0' in text


def test_a_snapshot_without_the_retry_fields_exports_no_retry_families() -> None:
    """An engine that predates them: absent series, not zeros that look like health."""
    text = scrape(snapshot())
    for name in (
        "leasekeeper_retry_budget_allowed",
        "leasekeeper_retry_budget_retries_deferred",
        "leasekeeper_delayed_jobs",
        "leasekeeper_held_tier_partitions",
    ):
        assert name not in text
    assert 'leasekeeper_acked_total{queue="emails"} 42.0' in text


def test_control_state_size_and_catch_up_are_exported() -> None:
    control = {
        "cancellations": 3,
        "dedupe_claims": 1200,
        "pruned": 40,
        "catch_up_s": 1.5,
        "catch_up_records": 1243,
    }
    text = scrape(snapshot(control=control))
    assert 'leasekeeper_control_cancellations{queue="emails"} 3.0' in text
    assert 'leasekeeper_control_dedupe_claims{queue="emails"} 1200.0' in text
    assert 'leasekeeper_control_pruned_total{queue="emails"} 40.0' in text
    assert 'leasekeeper_control_catch_up_seconds{queue="emails"} 1.5' in text
    assert "leasekeeper_control" not in scrape(snapshot())


def test_clamped_retry_after_values_are_counted() -> None:
    counters = dict.fromkeys(COUNTERS, 0) | {"invalid_retry_after": 2}
    assert 'leasekeeper_invalid_retry_after_total{queue="emails"} 2.0' in scrape(
        snapshot(counters=counters)
    )


def test_blocked_copies_are_exported_per_partition_for_alerting() -> None:
    outbox = {
        "pending": 3,
        "in_flight": 1,
        "blocked": [
            {"topic": "jobs.emails", "partition": 2, "offset": 7, "kind": "dead", "reason": "x"},
            {"topic": "jobs.emails", "partition": 2, "offset": 9, "kind": "retry", "reason": "x"},
        ],
        "counters": {"delivered": 5, "transient_failures": 1, "shrunk": 2, "blocked_events": 2},
    }
    text = scrape(snapshot(outbox=outbox))
    assert 'leasekeeper_copies_pending{queue="emails"} 3.0' in text
    assert 'leasekeeper_copies_in_flight{queue="emails"} 1.0' in text
    assert (
        'leasekeeper_copies_blocked{partition="2",queue="emails",topic="jobs.emails"} 2.0' in text
    )
    assert 'leasekeeper_copies_shrunk_total{queue="emails"} 2.0' in text
    assert 'leasekeeper_copies_blocked_events_total{queue="emails"} 2.0' in text


def _partition(topic: str, partition: int) -> dict[str, Any]:
    return {
        "topic": topic,
        "partition": partition,
        "committed": -1001,
        "highest_fetched": -1,
        "unresolved_count": 0,
        "leases": [],
    }


def test_no_series_repeats_when_the_queue_and_its_tiers_share_partition_numbers() -> None:
    """A leasekeeper holds partition 0 of the queue and of every tier topic: each
    (name, labels) pair must appear once, told apart by ``topic``."""
    topics = ["jobs.emails", "jobs.emails.retry.1s", "jobs.emails.retry.1m", "jobs.emails.dlq"]
    partitions = [_partition(topic, p) for topic in topics for p in (0, 1)]
    text = scrape(snapshot(partitions=partitions, **RETRY_FIELDS))
    seen: list[tuple[str, tuple[tuple[str, str], ...]]] = [
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]
    repeated = {series for series in seen if seen.count(series) > 1}
    assert not repeated
    in_flight = [s for s in seen if s[0] == "leasekeeper_leases_in_flight"]
    assert len(in_flight) == len(partitions)


def test_finished_jobs_waiting_for_a_commit_are_exported_per_partition() -> None:
    partition = {**snapshot()["partitions"][0], "uncommitted": 17}
    text = scrape(snapshot(partitions=[partition]))
    labels = '{partition="2",queue="emails",topic="jobs.emails"}'
    assert f"leasekeeper_uncommitted_jobs{labels} 17.0" in text


def test_the_switch_holds_of_diverted_floods_are_counted() -> None:
    text = scrape(snapshot(switch_holds=17))
    assert "# TYPE leasekeeper_switch_holds_total counter" in text
    assert 'leasekeeper_switch_holds_total{queue="emails"} 17.0' in text
    assert "leasekeeper_switch_holds" not in scrape(snapshot())
