"""The retry-storm simulator reproduces the shape of the design notes' comparison.

Jittered backoff keeps the load after recovery near what the dependency serves;
exponential backoff without jitter keeps every client synchronised, so each wave
after recovery is several times larger.
"""

from __future__ import annotations

import pytest

from devtools.retry_storm import StormResult, StormScenario, simulate
from leasekeeper.core.retry_policy import Jitter, RetryPolicy

CAPACITY = 20


def run(jitter: Jitter, clients: int, seed: int = 0) -> StormResult:
    scenario = StormScenario(clients=clients, outage_s=10.0, capacity=CAPACITY, seed=seed)
    return simulate(RetryPolicy(jitter=jitter), scenario)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_full_jitter_stays_near_capacity_while_no_jitter_comes_in_waves(seed: int) -> None:
    """300 clients (the notes' scale): full jitter peaks within 3x capacity."""
    full = run(Jitter.FULL, 300, seed)
    none = run(Jitter.NONE, 300, seed)
    print(f"seed {seed}: peak full {full.peak_after_recovery}, none {none.peak_after_recovery}")
    assert full.peak_after_recovery <= 3 * CAPACITY
    assert none.peak_after_recovery >= 5 * full.peak_after_recovery
    assert full.still_failing == 0
    assert none.still_failing > 0  # the waves leave clients failing at the horizon


def test_every_jitter_mode_beats_no_jitter_at_2000_clients() -> None:
    """2,000 clients need 50 s of capacity: no policy stays within 3x, jitter still helps."""
    peaks = {jitter: run(jitter, 2000).peak_after_recovery for jitter in Jitter}
    print("peaks after recovery at 2000 clients:", {str(k): v for k, v in peaks.items()})
    assert peaks[Jitter.NONE] == 2000  # everyone comes back in the same bucket
    for jitter in (Jitter.FULL, Jitter.EQUAL, Jitter.DECORRELATED):
        assert peaks[Jitter.NONE] >= 5 * peaks[jitter]
    assert peaks[Jitter.FULL] < peaks[Jitter.EQUAL]  # full jitter spreads the widest


def test_the_simulation_is_deterministic_for_a_seed() -> None:
    assert run(Jitter.FULL, 300, seed=4) == run(Jitter.FULL, 300, seed=4)
    assert run(Jitter.FULL, 300, seed=4) != run(Jitter.FULL, 300, seed=5)


def test_the_accounting_adds_up() -> None:
    result = run(Jitter.EQUAL, 300)
    assert result.total_calls == sum(result.calls_per_bucket)
    assert result.total_calls - result.failed_calls == 300  # one success per client
    assert result.all_done_s is not None
    assert result.calls_per_bucket[0] == 300  # everyone fails at t=0


def test_without_jitter_the_waves_are_the_exponential_schedule() -> None:
    result = run(Jitter.NONE, 300)
    waves = [i * 0.5 for i, calls in enumerate(result.calls_per_bucket) if calls]
    assert waves[:5] == [0.0, 2.0, 6.0, 14.0, 30.0]  # delays 2, 4, 8, 16 s after attempts 1-4


def test_nothing_is_served_during_the_outage() -> None:
    result = simulate(
        RetryPolicy(jitter=Jitter.NONE, base_s=1.0),
        StormScenario(clients=10, outage_s=100.0, horizon_s=50.0, capacity=CAPACITY),
    )
    assert result.failed_calls == result.total_calls
    assert result.still_failing == 10
    assert result.all_done_s is None
    assert result.peak_after_recovery == 0
