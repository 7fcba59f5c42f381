"""Every map the whole engine keeps, keyed by tenant, ordering key or job id, holds
its active entries plus a bounded number of recent ones (issue 36 item 5).

Not a list of the maps known today: the test walks the engine's object graph and
measures every container it finds, after jobs of ever new tenants, ordering keys
and job ids were fetched, leased, settled (acked, failed and retried, cancelled)
and committed. A map added later that only ever grows fails it without an edit
here. The windows of job ids (acked lately, settlements a worker may send again)
hold the same recent-keys limit as every other map."""

from __future__ import annotations

import types
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from leasekeeper.core.leases import SettleKind, Settlement, TopicPart
from leasekeeper.core.recent import RECENT_LIMIT
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.fairness.weighted import TenantPolicy
from leasekeeper.limits.rate_limit import rate_limit_config
from schemas.job import Job

TP = TopicPart("jobs.q.ready", 0)
BATCH = 500

PROJECT = ("leasekeeper.", "jobcore.", "schemas.")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _fields(obj: object) -> Iterator[tuple[str, Any]]:
    """An object's attributes: its ``__dict__`` and slots, or a compiled class's."""
    names = set(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        for name, attr in vars(cls).items():
            if isinstance(attr, types.MemberDescriptorType | types.GetSetDescriptorType):
                names.add(name)
    for name in sorted(names):
        if name.startswith("__"):
            continue
        try:
            yield name, getattr(obj, name)
        except AttributeError:
            continue


def containers(root: object) -> dict[str, int]:
    """The largest size of each container reachable from ``root`` through project
    objects, named ``Class.attribute``."""
    sizes: dict[str, int] = {}
    seen: set[int] = set()
    stack: list[tuple[str, object]] = [("LeaseEngine", root)]
    while stack:
        where, obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, dict | set | frozenset | list | tuple | deque):
            if not isinstance(obj, tuple):
                sizes[where] = max(sizes.get(where, 0), len(obj))
            values = obj.values() if isinstance(obj, dict) else obj
            if len(obj) <= 64:  # the entries of a large map are all alike: walk a few
                stack.extend((where, value) for value in values)
            else:
                stack.extend((where, value) for value, _ in zip(values, range(64), strict=False))
            continue
        if not type(obj).__module__.startswith(PROJECT):
            continue
        for name, value in _fields(obj):
            stack.append((f"{type(obj).__name__}.{name}", value))
    return sizes


def loop_turn(engine: LeaseEngine) -> None:
    """What the Kafka loop asks of the engine on each turn besides fetching."""
    engine.fetch.promote_due()
    engine.workers.expire()
    engine.limits.park_excess()
    engine.workers.sweep_unhandled()
    engine.fetch.prune_notes()


def serve(engine: LeaseEngine, clock: Clock, start: int, count: int) -> None:
    """``count`` jobs, each of a new tenant, a new ordering key for every third and a
    new id: fetched, leased and acked, or (every tenth unordered one) failed and copied
    to its retry tier."""
    for first in range(start, start + count, BATCH):
        offsets = range(first, min(first + BATCH, start + count))
        for offset in offsets:
            job = Job(job_id=f"job-{offset}", queue="q", tenant_id=f"tenant-{offset}",
                      type="noop", payload=b"", created_at_ms=0, max_attempts=3,
                      ordering_key=f"key-{offset}" if offset % 3 == 0 else None)  # fmt: skip
            engine.fetch.offer(TP, offset, job, b"")
        loop_turn(engine)
        left = len(offsets)
        while left:
            grants = engine.workers.claim("w", 100, wait_s=0)
            assert grants, "jobs left that no claim hands out"
            settlements = []
            for grant in grants:
                assert grant.job is not None
                number = int(grant.job.job_id.removeprefix("job-"))
                fail = number % 10 == 1 and number % 3 != 0
                outcome = SettleKind.NACK if fail else SettleKind.ACK
                settlements.append(Settlement(lease_id=grant.lease_id, token=grant.token,
                                              outcome=outcome, retry_after_s=0))  # fmt: skip
            engine.workers.settle(settlements)
            left -= len(settlements)
            for request in engine.copies.take():
                engine.copies.delivered(request, dead=False)
            engine.copies.take_statuses()
            clock.now += 0.02
            loop_turn(engine)
        engine.commits.committed(engine.commits.commit_positions())


@pytest.mark.slow
def test_every_map_of_the_engine_stays_bounded_as_new_tenants_keys_and_ids_come(
    tmp_path: Path,
) -> None:
    clock = Clock()
    config = EngineConfig(lease_s=30, rate_limits=rate_limit_config(tenant="1000/s"),
                          tenants=TenantPolicy(default_cap=10))  # fmt: skip
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=config, clock=clock, monotonic=clock)
    engine.partitions.assign(TP, 0)
    serve(engine, clock, 0, 2 * RECENT_LIMIT)
    serve(engine, clock, 2 * RECENT_LIMIT, 4 * RECENT_LIMIT)
    late = containers(engine)
    found = {"WeightedFair._vtime", "RateLimits._tenants", "KeyBook._lines", "ResolvedIds._ended",
             "LeaseLookup._recently_settled"}  # fmt: skip
    assert found <= set(late), f"the walk missed maps it must see: {found - set(late)}"
    over = {where: size for where, size in late.items() if size > RECENT_LIMIT + BATCH}
    assert not over, f"maps past their bound after {6 * RECENT_LIMIT:,} tenants: {over}"
    assert engine.partitions.in_flight() == 0
