"""The sizes of a run: the issue's full load, a quick mode, and the CLI's overrides.

Kept in one value so every scenario reads the same numbers and the report can
print exactly what was run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

CODECS = ("file", "registry", "both")
SCENARIOS = ("drain", "raw", "share", "peers", "latency", "recovery", "memory", "noisy", "micro")


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    """Every size and time bound of a run (see ``BENCHMARKS.md`` for the reasons)."""

    quick: bool
    jobs: int = 200_000
    tenants: int = 20
    partitions: int = 8
    payload_bytes: int = 100
    drain_workers: tuple[int, ...] = (1, 2, 4)
    # Handler slots per worker process, the same for ours and every peer: no-op
    # jobs need deep batches (64) to measure the queue rather than round trips;
    # 10 ms jobs get 4 processes x 8 slots, what a user would start for I/O.
    concurrency: int = 64
    processes: int = 4
    io_concurrency: int = 8
    io_jobs: int = 20_000
    peer_jobs: int = 200_000
    io_ms: int = 10
    drain_timeout_s: float = 240.0
    latency_rates: tuple[float, ...] = (2_300.0,)
    latency_half_max: bool = True
    latency_s: float = 20.0
    recovery_slots: int = 32
    recovery_lease_s: float = 5.0
    recovery_phase_s: float = 6.0
    memory_backlog: int = 1_000_000
    memory_leases: int = 1_000
    memory_sample_s: float = 20.0
    profile_s: float = 12.0
    # Interleaved pairs of drains with and without status records (0: none).
    status_cost_repeats: int = 3
    # Interleaved pairs of drains with 1,000 ordering keys and without (0: none).
    ordering_cost_repeats: int = 0
    peers_need_install: bool = True
    # "file": the embedded file registry (every scenario); "registry": the drain in
    # registry mode (Confluent wire format, a local Apicurio Registry); "both": the
    # drain scenario compares the two, interleaved, ``codec_rounds`` times each.
    codec: str = "file"
    codec_rounds: int = 3
    # The noisy scenario's 1,000,000-job undiverted flood: only when it runs alone
    # (``make bench SCENARIO=noisy``), a few minutes more.
    big_flood: bool = False

    @classmethod
    def full(cls) -> BenchConfig:
        return cls(quick=False)

    @classmethod
    def quick_mode(cls) -> BenchConfig:
        """Small enough for ``make bench QUICK=1`` in well under five minutes."""
        return cls(
            quick=True,
            jobs=5_000,
            peer_jobs=5_000,
            drain_workers=(1, 2),
            io_jobs=2_000,
            drain_timeout_s=60.0,
            latency_s=5.0,
            recovery_phase_s=3.0,
            recovery_lease_s=3.0,
            memory_backlog=50_000,
            memory_sample_s=5.0,
            profile_s=0.0,
            peers_need_install=False,
        )

    def with_jobs(self, jobs: int) -> BenchConfig:
        return replace(
            self, jobs=jobs, peer_jobs=min(self.peer_jobs, jobs), io_jobs=min(self.io_jobs, jobs)
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def select(names: list[str]) -> list[str]:
    """Scenario names from names or numbers (``1``..``9``), in the canonical order."""
    if not names:
        return list(SCENARIOS)
    chosen = set()
    for raw in names:
        for item in raw.split(","):
            item = item.strip().lower()
            if item.isdigit() and 1 <= int(item) <= len(SCENARIOS):
                chosen.add(SCENARIOS[int(item) - 1])
            elif item in SCENARIOS:
                chosen.add(item)
            elif item:
                raise ValueError(f"unknown scenario {item!r}; pick from {', '.join(SCENARIOS)}")
    return [s for s in SCENARIOS if s in chosen]
