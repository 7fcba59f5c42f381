"""The status-records cost pairs: which side runs first alternates from pair to pair."""

from __future__ import annotations

from benchmarks.measure import DrainResult
from benchmarks.status_cost import measure


def test_pairs_alternate_which_side_runs_first() -> None:
    """A machine that speeds up through the run favours whichever side runs second;
    alternating the order gives each side the second place as often."""
    sides: list[bool] = []

    def drain(status_records: bool) -> DrainResult:
        sides.append(status_records)
        cpu = 1.2 if status_records else 1.0
        return DrainResult(system="ours", variant="x", jobs=1000, seconds=1.0,
                           cpu_s={"leasekeeper": cpu, "workers": 0.5, "broker": 0.2})  # fmt: skip

    result = measure(drain, repeats=3)
    assert sides == [True, False, False, True, True, False]
    assert [(r["pair"], r["status_records"]) for r in result["runs"]] == [
        (1, "on"), (1, "off"), (2, "off"), (2, "on"), (3, "on"), (3, "off"),
    ]  # fmt: skip
    assert result["overhead_percent"]["leasekeeper"] == 20.0
