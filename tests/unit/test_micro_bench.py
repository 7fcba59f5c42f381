"""The hot-path micro-benchmarks run and report one positive figure per path."""

from __future__ import annotations

from benchmarks.config import select
from benchmarks.micro import measure


def test_every_hot_path_is_measured() -> None:
    rows = measure(200)
    names = [row["variant"] for row in rows]
    assert any(n.startswith("envelope read") for n in names)
    assert any(n.startswith("claim") for n in names)
    assert any(n.startswith("settle") for n in names)
    assert any(n.startswith("worker dispatch: handler threads") for n in names)
    assert sum(n.startswith("RPC round trip") for n in names) == 2  # back to back, spaced
    assert all(row["us_per_job"] > 0 and row["jobs"] == 200 for row in rows)


def test_micro_is_scenario_nine() -> None:
    assert select(["9"]) == ["micro"] == select(["micro"])
