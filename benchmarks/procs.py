"""Process plumbing: CPU time and memory from ``/proc``, pinning, start and stop.

CPU is read from ``/proc/<pid>/stat`` (and every descendant) rather than from
``resource``: the processes measured are not always our children (a broker, a
database's backends), and a reading must be taken while they still run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from devtools.waiting import wait_until as wait_until

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Pinning:
    """Which CPUs servers (broker, database) and Python clients may use.

    With two cores the servers get core 0 and every Python process core 1, so a
    client cannot steal the broker's core (and the other way round). ``None``
    means "not pinned" (one core, or ``--no-pin``).
    """

    servers: str | None
    clients: str | None
    every: str | None = None

    @classmethod
    def plan(cls, enabled: bool) -> Pinning:
        cpus = sorted(os.sched_getaffinity(0))
        if not enabled or len(cpus) < 2 or shutil.which("taskset") is None:
            return cls(servers=None, clients=None)
        half = len(cpus) // 2
        return cls(
            servers=",".join(str(c) for c in cpus[:half]),
            clients=",".join(str(c) for c in cpus[half:]),
            every=",".join(str(c) for c in cpus),
        )

    def describe(self) -> str:
        if self.servers is None:
            return "not pinned"
        return f"servers on CPU {self.servers}, Python clients on CPU {self.clients}"

    def server_prefix(self) -> list[str]:
        return ["taskset", "-c", self.servers] if self.servers else []

    def everywhere_prefix(self) -> list[str]:
        """Run a client on every CPU despite the pinning (the "not pinned" comparison)."""
        return ["taskset", "-c", self.every] if self.every else []

    def pin_self_to_clients(self) -> None:
        """Children inherit this affinity, so every client started later is pinned too."""
        if self.clients:
            os.sched_setaffinity(0, {int(c) for c in self.clients.split(",")})

    def pin_server(self, pid: int) -> None:
        """Move every thread of a running server (the JVM) onto the server CPUs."""
        if self.servers:
            subprocess.run(
                ["taskset", "-a", "-cp", self.servers, str(pid)],
                check=True,
                capture_output=True,
            )


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return [int(x) for x in path.read_text().split()]
    except (OSError, ValueError):
        return []


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants alive now."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children(current))
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # After the ")" field 0 is the state; utime and stime are fields 11 and 12.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def tree_cpu_seconds(pids: Iterable[int]) -> float:
    return sum(cpu_seconds(p) for root in pids for p in tree(root))


def rss_bytes(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return 0


class CpuMeter:
    """CPU-seconds each named component used between :meth:`start` and :meth:`stop`."""

    def __init__(self, components: Mapping[str, Callable[[], Sequence[int]]]) -> None:
        self._components = dict(components)
        self._before: dict[str, float] = {}
        self.used: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        return {name: tree_cpu_seconds(pids()) for name, pids in self._components.items()}

    def start(self) -> None:
        self._before = self._read()

    def stop(self) -> dict[str, float]:
        after = self._read()
        self.used = {k: max(0.0, after[k] - self._before.get(k, 0.0)) for k in after}
        return self.used


def per_thousand(used: Mapping[str, float], jobs: int) -> dict[str, float]:
    return {k: round(v * 1000 / jobs, 4) for k, v in used.items()} if jobs else {}


def start(
    cmd: Sequence[str],
    *,
    log: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    user: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start a process in its own session with output to ``log``, so stop() can end its tree."""
    with log.open("ab") as out:
        return subprocess.Popen(
            list(cmd),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            user=user,
            start_new_session=True,
        )


def stop(process: subprocess.Popen[bytes] | None, grace: float = 15.0) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds."""
    if process is None or process.poll() is not None:
        return
    _signal_group(process, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait()


def kill(process: subprocess.Popen[bytes]) -> None:
    """``kill -9`` of the process itself (not its group): the crash under test."""
    process.kill()
    process.wait()


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)
