"""The lease engine's parts on their own: the ready window, the partition book, the
injected dispatch policy, and the typed snapshot turned into JSON only at the edge."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from jobcore.plain import plain
from leasekeeper.core.leases import Pending, TopicPart
from leasekeeper.core.partition_book import PartitionBook
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.store_values import Resolution
from leasekeeper.core.window import ReadyWindow
from leasekeeper.engine import Counters, EngineConfig, LeaseEngine
from leasekeeper.fairness.weighted import ready_policy
from leasekeeper.views.metrics import EngineCollector
from leasekeeper.views.snapshots import EngineSnapshot
from schemas.job import Job
from schemas.job_headers import JobHead

TP = TopicPart("jobs.q", 0)


def job(i: int, tenant: str = "t1") -> Job:
    return Job(
        job_id=f"job-{i}", queue="q", tenant_id=tenant, type="noop", payload=b"", created_at_ms=0
    )


def pending(i: int, generation: int = 1, size: int = 10) -> Pending:
    return Pending(
        tp=TP, offset=i, generation=generation, job=JobHead.of(job(i)), envelope=b"x" * size
    )


class Wakes:
    def __init__(self) -> None:
        self.count = 0
        self.types: list[str] = []

    def __call__(self, job_type: str) -> None:
        self.count += 1
        self.types.append(job_type)


def test_the_window_counts_delayed_jobs_and_bytes_in_its_room() -> None:
    wakes = Wakes()
    window = ReadyWindow(records=3, max_bytes=25, wake=wakes, policy=ready_policy())
    window.queue(pending(0), not_before_ms=0, now_ms=1000)
    window.queue(pending(1), not_before_ms=5000, now_ms=1000)  # delayed
    assert (window.ready_count, window.delayed_count, window.room()) == (1, 1, 1)
    assert wakes.types == ["noop"], "only a ready job wakes claimers, naming its type"
    window.queue(pending(2, size=20), not_before_ms=0, now_ms=1000)
    assert window.room() == 0, "30 bytes held: full by bytes before full by records"


def test_promotion_skips_jobs_whose_partition_moved_and_drop_forgets_delayed_jobs() -> None:
    window = ReadyWindow(records=10, max_bytes=1000, wake=Wakes(), policy=ready_policy())
    for i in range(3):
        window.queue(pending(i), not_before_ms=100 + i, now_ms=0)
    moved = window.promote_due(101, live=lambda p: p.offset != 0)
    assert moved == 1 and [p.offset for p in window.ready()] == [1]
    window.drop(lambda p: p.offset == 2)
    assert window.delayed_count == 0 and window.promote_due(10_000, live=lambda p: True) == 0


def test_the_book_turns_away_a_delivery_report_from_before_a_move(tmp_path: Path) -> None:
    counters = Counters()
    book = PartitionBook(store=LeaseStore(tmp_path), counters=counters, max_span=1000)
    book.assign(TP, -1001, None, book.recall(TP, -1001, None))
    old = book.parts[TP].generation
    assert book.track_unoffered(TP, 0) == old
    book.revoke(TP)
    book.assign(TP, -1001, None, book.recall(TP, -1001, None))  # it came back: a new owner
    book.resolve(TP, 0, old, Resolution.DEAD)  # the copy's report arrives late
    assert counters.dead == 0 and book.commit_positions(None) == {}
    assert book.current(TP, old) is None and book.current(TP, old + 1) is not None


class RecordingPolicy:
    """The default policy, noting what is pushed (a compiled class: wrapped, not derived)."""

    def __init__(self) -> None:
        self._policy = ready_policy()
        self.pushed: list[str] = []

    def push(self, tenant: str, item: Pending) -> None:
        self.pushed.append(item.job.job_id)
        self._policy.push(tenant, item)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)

    def __iter__(self) -> Iterator[Pending]:
        return iter(self._policy)

    def __len__(self) -> int:
        return len(self._policy)


def test_the_dispatch_policy_is_injected(tmp_path: Path) -> None:
    policy = RecordingPolicy()
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(), policy=policy)
    engine.partitions.assign(TP, -1001)
    engine.fetch.offer(TP, 0, job(0), b"x")
    assert policy.pushed == ["job-0"]
    assert [g.lease_id for g in engine.workers.claim("w", 5, wait_s=0)] == [TP.lease_id(0)]


def test_the_snapshot_is_typed_and_becomes_json_at_the_edge(tmp_path: Path) -> None:
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig())
    engine.partitions.assign(TP, -1001)
    engine.fetch.offer(TP, 0, job(0, "acme"), b"x")
    engine.workers.claim("w", 1, wait_s=0)
    snap = engine.views.snapshot()
    assert isinstance(snap, EngineSnapshot)
    assert snap.partitions[0].leases[0].job_id == "job-0"
    assert snap.in_flight_by_tenant == {"acme": 1}
    data = json.loads(json.dumps(plain(snap)))
    assert data["partitions"][0]["leases"][0]["worker"] == "w"
    assert set(data["counters"]) == {f.name for f in fields(Counters)}


def test_metrics_export_every_counter_of_the_engine() -> None:
    """cancelled and deduplicated were counted but never exported; a counter added to
    ``Counters`` is exported without another edit."""
    counters = {f.name: i + 1 for i, f in enumerate(fields(Counters))}
    snap = {"ready": 0, "partitions": [], "counters": counters}
    registry = CollectorRegistry()
    registry.register(EngineCollector(lambda: snap, "emails"))
    text = generate_latest(registry).decode()
    for name, value in counters.items():
        assert f'leasekeeper_{name}_total{{queue="emails"}} {float(value)}' in text
