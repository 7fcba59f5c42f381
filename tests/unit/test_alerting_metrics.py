"""Limiters and dead letters seen (issue 18, part 3): the metrics a scrape returns, the
``inspect`` lines, and the DLQ watch keeping its last figures through a Kafka outage."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from jobcore.plain import plain
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.dashboard.kafka_view import DeadLetterFigures, dlq_depth
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.fairness.ready_targets import ready_targets
from leasekeeper.limits.lines import limit_lines
from leasekeeper.limits.rate_limit import rate_limit_config
from leasekeeper.ops.dlq_watch import DlqWatch
from leasekeeper.views.metrics import COUNTERS, EngineCollector
from schemas.job import Job

TP = TopicPart("jobs.emails", 0)
NOW_MS = 1_800_000_000_000


def limited_snapshot(path: Path) -> dict[str, Any]:
    """A real engine's limiters after a claim: sms 3/s (3 dispatched, 2 waiting)."""
    limits = rate_limit_config(by_type=["sms=3/s"], tenant_for=["acme=1/m"])
    engine = LeaseEngine(store=LeaseStore(path),
                         config=EngineConfig(rate_limits=limits))  # fmt: skip
    engine.partitions.assign(TP, -1001)
    for i in range(5):
        job = Job(job_id=f"j{i}", queue="emails", tenant_id="t", type="sms", payload=b"",
                  created_at_ms=0)  # fmt: skip
        engine.fetch.offer(TP, i, job, b"x")
    assert len(engine.workers.claim("w", 10, wait_s=0)) == 3
    snap = engine.limits.snapshot()
    assert snap is not None
    return {
        "ready": 2,
        "partitions": [],
        "counters": dict.fromkeys(COUNTERS, 0),
        "limits": plain(snap),
        "dead_letters": {"depth": 17, "newest_ms": NOW_MS - 90_000, "checked_ms": NOW_MS},
    }


def samples(snap: dict[str, Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(EngineCollector(lambda: snap, "emails"))
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_limiters_and_dead_letters_are_exported(tmp_path: Path) -> None:
    found = samples(limited_snapshot(tmp_path))
    sms = (("limiter", "type"), ("name", "sms"), ("queue", "emails"))
    acme = (("limiter", "tenant"), ("name", "acme"), ("queue", "emails"))
    assert found[("leasekeeper_rate_limit_per_second", sms)] == 3
    assert found[("leasekeeper_rate_limit_tokens", sms)] < 1
    assert found[("leasekeeper_rate_limit_waiting_jobs", sms)] == 2
    assert found[("leasekeeper_rate_limit_dispatched_total", sms)] == 3
    assert found[("leasekeeper_rate_limit_parked_total", sms)] == 0
    assert found[("leasekeeper_rate_limit_tokens", acme)] == 1
    queue = (("queue", "emails"),)
    assert found[("leasekeeper_dlq_depth", queue)] == 17
    age = found[("leasekeeper_dlq_newest_age_seconds", queue)]
    assert age >= (time.time() * 1000 - (NOW_MS - 90_000)) / 1000 - 5


def test_no_limits_no_limiter_families(tmp_path: Path) -> None:
    snap = limited_snapshot(tmp_path)
    del snap["limits"]
    snap["dead_letters"] = {"depth": 0, "newest_ms": None, "checked_ms": NOW_MS}
    names = {name for name, _ in samples(snap)}
    assert not any(n.startswith("leasekeeper_rate_limit") for n in names)
    assert "leasekeeper_dlq_depth" in names
    assert "leasekeeper_dlq_newest_age_seconds" not in names, "an empty DLQ has no newest"


def test_inspect_shows_each_limiter_and_the_dlq(tmp_path: Path) -> None:
    lines = limit_lines(limited_snapshot(tmp_path), NOW_MS)
    text = "\n".join(lines)
    # The bucket refills on the real clock between the snapshot and the check (0.1
    # token after 33 ms on a slow machine): the spent bucket reads as under one token.
    sms = re.search(r"type sms: limit 3/s, here 3/s, tokens (\d+\.\d), waiting 2, parked 0", text)
    assert sms is not None, text
    assert float(sms.group(1)) < 1.0
    assert "tenant acme: limit 1/m" in text
    assert "dead letters[/] 17, newest 90s ago" in text
    assert limit_lines({"ready": 0}, NOW_MS) == [], "an older leasekeeper shows nothing new"


def test_dlq_depth_counts_only_the_dlq_between_its_watermarks() -> None:
    marks = {("jobs.e.dlq", 0): (5, 12), ("jobs.e.dlq", 1): (0, 3), ("jobs.e", 0): (0, 99)}
    assert dlq_depth(marks, "jobs.e.dlq") == 10


def test_the_dlq_watch_keeps_its_last_figures_while_kafka_is_away() -> None:
    answers: list[DeadLetterFigures | Exception] = [
        DeadLetterFigures(depth=4, newest_ms=123),
        RuntimeError("broker down"),
    ]

    def figures() -> DeadLetterFigures:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    watch = DlqWatch(figures, clock=lambda: 1000.0)
    assert watch.view() is None
    watch.check()
    watch.check()
    view = watch.view()
    assert view is not None and (view.depth, view.newest_ms, view.checked_ms) == (4, 123, 1_000_000)


def test_a_dlq_watch_that_cannot_read_says_so_once_at_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A DLQ-depth alert that froze silently (an ACL, a broker problem) would look like
    a quiet DLQ: the first failure of a streak is a WARNING, the rest DEBUG."""
    answers: list[DeadLetterFigures | Exception] = [
        RuntimeError("not authorised"),
        RuntimeError("again"),
        DeadLetterFigures(depth=1, newest_ms=5),
    ]

    def figures() -> DeadLetterFigures:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    watch = DlqWatch(figures, clock=lambda: 1.0)
    with caplog.at_level(logging.DEBUG, logger="leasekeeper.ops.dlq_watch"):
        watch.check()
        watch.check()
        watch.check()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert "not authorised" in warnings[0] and "available again" in warnings[1]
    assert watch.view() is not None


def test_ready_targets_default_per_class_and_are_exported() -> None:
    targets = ready_targets(["critical=250ms"], ["critical", "default", "bulk", "batch"])
    assert targets == {"critical": 0.25, "default": 30.0, "bulk": 600.0, "batch": 30.0}
    registry = CollectorRegistry()
    snap = {"ready": 0, "partitions": [], "counters": dict.fromkeys(COUNTERS, 0)}
    registry.register(EngineCollector(lambda: snap, "emails", targets))
    text = generate_latest(registry).decode()
    assert 'leasekeeper_class_ready_target_seconds{class="critical",queue="emails"} 0.25' in text
    assert 'leasekeeper_class_ready_target_seconds{class="batch",queue="emails"} 30.0' in text


def test_a_job_is_late_from_when_it_was_due_not_from_its_enqueue(tmp_path: Path) -> None:
    """A retried, delayed or parked job waited on purpose: the class's oldest-ready age
    (what the ready-target alert reads) counts from its run_at."""
    now_s = 2_000.0
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(),
                         clock=lambda: now_s)  # fmt: skip
    engine.partitions.assign(TP, -1001)
    delayed = Job(job_id="d", queue="emails", tenant_id="t", type="sms", payload=b"",
                  created_at_ms=1_000_000, run_at_ms=1_998_000)  # fmt: skip
    engine.fetch.offer(TP, 0, delayed, b"x")
    (default,) = [c for c in engine.views.fairness().classes if c.name == "default"]
    assert default.oldest_ready_age_ms == 2_000, "due 2 s ago, enqueued 1000 s ago"
