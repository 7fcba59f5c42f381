"""One drain measurement, the same for every system.

The clock starts when the first handler of the load runs (read from the
progress files), not when processes are launched: Python start-up is a cost
every system pays once and would otherwise dominate small loads. It stops when
the system says the load is durably done (ours: committed offsets at the end;
peers: every job handled). CPU is read over the same interval.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import procs, progress

POLL_S = 0.05


@dataclass
class DrainResult:
    system: str
    variant: str
    jobs: int
    seconds: float
    cpu_s: dict[str, float] = field(default_factory=dict)
    capped: bool = False
    note: str = ""

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0

    def row(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "variant": self.variant,
            "jobs": self.jobs,
            "seconds": round(self.seconds, 3),
            "jobs_per_s": round(self.jobs_per_s, 1),
            "cpu_s": {k: round(v, 3) for k, v in self.cpu_s.items()},
            "cpu_s_per_1000_jobs": procs.per_thousand(self.cpu_s, self.jobs),
            "capped": self.capped,
            "note": self.note,
        }


def drain(
    *,
    system: str,
    variant: str,
    progress_dir: Path,
    total: int,
    components: Mapping[str, Callable[[], Sequence[int]]],
    done: Callable[[], bool] | None = None,
    timeout_s: float,
    alive: Callable[[], None] | None = None,
) -> DrainResult:
    """Wait for the first job, then for ``done`` (default: ``total`` handled), within ``timeout_s``.

    ``alive`` raises when a process under test died, so a crash is an error
    with its log rather than a slow result.
    """
    finished = done or (lambda: progress.read(progress_dir).count >= total)
    meter = procs.CpuMeter(components)
    deadline = time.monotonic() + timeout_s
    while progress.read(progress_dir).first is None:
        if alive is not None:
            alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{system} {variant}: no job started within {timeout_s:.0f}s")
        time.sleep(POLL_S)
    meter.start()
    capped = False
    while not finished():
        if alive is not None:
            alive()
        if time.monotonic() > deadline:
            capped = True
            break
        time.sleep(POLL_S)
    ended = time.time()
    meter.stop()
    snap = progress.read(progress_dir)
    first = snap.first or ended
    jobs = total if not capped else min(snap.count, total)
    return DrainResult(
        system=system,
        variant=variant,
        jobs=jobs,
        seconds=max(ended - first, 1e-6),
        cpu_s=meter.used,
        capped=capped,
        note=f"stopped at the {timeout_s:.0f}s bound" if capped else "",
    )
