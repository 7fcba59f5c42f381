"""Scenario 9: micro-benchmarks of the hot paths (see ``benchmarks.micro``).

Run in a child process, pinned with the other Python clients, so its numbers do
not depend on what the harness imported or left running.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from benchmarks.context import REPO, BenchContext
from benchmarks.scenarios import result

QUICK_JOBS = 10_000
FULL_JOBS = 100_000


def run(ctx: BenchContext) -> dict[str, Any]:
    jobs = QUICK_JOBS if ctx.config.quick else FULL_JOBS
    cmd = [sys.executable, "-m", "benchmarks.micro", "--jobs", str(jobs)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"benchmarks.micro failed: {done.stderr[-2000:]}")
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    return result("micro", "hot paths, µs per job in one process", {"jobs": jobs}, rows)
