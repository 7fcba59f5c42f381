"""What the leasekeeper no longer does per job or per loop step."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from leasekeeper.core.leases import Pending, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.window import ReadyWindow
from leasekeeper.engine import EngineConfig, LeaseEngine
from schemas.job import Job

TP = TopicPart("jobs.q", 0)


def _job(n: int, type: str) -> Job:
    return Job(job_id=f"j{n}", queue="q", tenant_id="t", type=type, payload=b"",
               created_at_ms=0)  # fmt: skip


def test_the_unhandled_sweep_skips_the_window_when_every_ready_type_is_handled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It ran every reaper turn over every ready job (16,000 in a full window); the
    window knows its types, so the pass is made only when one is not handled."""
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(lease_s=10))
    engine.partitions.assign(TP, 0)
    for n in range(3):
        engine.fetch.offer(TP, n, _job(n, "noop"), b"x")
    engine.workers.claim("w", 1, wait_s=0, job_types=frozenset({"noop"}))
    seen: list[int] = []

    class CountedWindow:
        """The engine's window, counting the passes over its ready jobs."""

        def __init__(self, window: ReadyWindow) -> None:
            self._window = window

        def ready(self) -> Iterator[Pending]:
            seen.append(1)
            return self._window.ready()

        def __getattr__(self, name: str) -> object:
            return getattr(self._window, name)

    unhandled = engine._unhandled
    monkeypatch.setattr(unhandled, "_window", CountedWindow(unhandled._window))
    assert engine.workers.sweep_unhandled() == 0
    assert seen == []
    engine.fetch.offer(TP, 3, _job(3, "other"), b"x")  # no connected worker runs it
    assert engine.workers.sweep_unhandled() == 0  # within its grace, but looked at
    assert seen == [1]
