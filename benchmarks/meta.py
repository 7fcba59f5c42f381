"""The machine, versions and load a run happened on, recorded next to its numbers.

Ratios are only meaningful on one machine in one run; these facts let a
reader judge whether two result files are comparable at all.
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.peers.servers import postgres_bin, redis_bin
from devtools.localkafka.distribution import kafka_version

PACKAGES = (
    "confluent-kafka", "grpcio", "rocksdict", "fastavro", "celery", "kombu", "redis",
    "dramatiq", "psycopg", "matplotlib", "py-spy",
)  # fmt: skip


def machine() -> dict[str, Any]:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    models = [
        line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if "model name" in line
    ]
    meminfo = Path("/proc/meminfo").read_text().split()
    mem_kib = int(meminfo[meminfo.index("MemTotal:") + 1])
    return {
        "nproc": os.cpu_count(),
        "cpu_model": models[0] if models else platform.processor(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def versions() -> dict[str, str]:
    found = {"python": platform.python_version(), "kafka": kafka_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    found["redis-server"] = _first_line([redis_bin() or "", "--version"])
    postgres = postgres_bin("postgres")
    found["postgres"] = _first_line([str(postgres), "--version"]) if postgres else "not installed"
    return found


def source(repo: Path) -> str:
    """The commit measured (``BENCH_SOURCE`` names it when the tree is an export)."""
    named = os.environ.get("BENCH_SOURCE")
    if named:
        return named
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def _first_line(cmd: list[str]) -> str:
    if not cmd[0]:
        return "not installed"
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return "not installed"
    return (out.stdout or out.stderr).strip().splitlines()[0] if out.stdout or out.stderr else ""
