"""Progress of handler processes, shared through small files.

Every system under test (ours, share consumers, Celery, Dramatiq, the Postgres
queue) runs its handlers in processes the harness did not write the main loop
of. Each handler calls :func:`hit`; a daemon thread rewrites
``$BENCH_PROGRESS_DIR/<pid>.progress`` every 50 ms with the count and the
wall-clock time of the first job, so the harness can tell when a load is done
and when work really started (process start-up is not counted as drain time).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ENV_DIR = "BENCH_PROGRESS_DIR"
FLUSH_S = 0.05


class _Progress:
    def __init__(self) -> None:
        self.count = 0
        self.first: float | None = None
        self.samples: list[float] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def hit(self, sample: float | None = None) -> None:
        with self._lock:
            if self._pid != os.getpid():  # first hit in this (possibly forked) process
                self._begin()
            if self.first is None:
                self.first = time.time()
            self.count += 1
            if sample is not None:
                self.samples.append(sample)

    def _begin(self) -> None:
        self._pid = os.getpid()
        self.count, self.first, self.samples = 0, None, []
        self._thread = threading.Thread(target=self._flush_forever, daemon=True)
        self._thread.start()

    def _flush_forever(self) -> None:
        directory = Path(os.environ.get(ENV_DIR, "."))
        path = directory / f"{os.getpid()}.progress"
        samples_path = directory / f"{os.getpid()}.samples"
        written = -1
        while True:
            time.sleep(FLUSH_S)
            with self._lock:
                count, first = self.count, self.first
                samples, self.samples = self.samples, []
            if count == written:
                continue
            written = count
            if samples:
                with samples_path.open("a") as out:
                    out.write("".join(f"{s:.3f}\n" for s in samples))
            tmp = path.with_suffix(".tmp")
            tmp.write_text(f"{count} {first or 0.0}\n")
            tmp.replace(path)


_PROGRESS = _Progress()


def hit(sample: float | None = None) -> None:
    """Count one handled job (``sample``: an optional number to collect, e.g. a latency)."""
    _PROGRESS.hit(sample)


@dataclass(frozen=True)
class Snapshot:
    count: int
    first: float | None


def read(directory: Path) -> Snapshot:
    """The total count over every process, and the earliest first-job time."""
    count, firsts = 0, []
    for path in directory.glob("*.progress"):
        try:
            n, first = path.read_text().split()
        except (OSError, ValueError):
            continue
        count += int(n)
        if float(first) > 0:
            firsts.append(float(first))
    return Snapshot(count=count, first=min(firsts) if firsts else None)


def count_of(directory: Path, pid: int) -> int:
    """Jobs run so far by the one process ``pid`` (0 before its first flush)."""
    try:
        return int((directory / f"{pid}.progress").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def samples(directory: Path) -> list[float]:
    found: list[float] = []
    for path in directory.glob("*.samples"):
        found.extend(float(x) for x in path.read_text().split())
    return found
