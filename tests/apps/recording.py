"""A worker app for system tests: records every run and every confirmed ack.

Each process appends to its own files in ``$RECORDING_DIR`` (one line per
event, written before the handler returns), so a test can tell which jobs ran,
how often, and which acks the leasekeeper confirmed.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

from workers.app import App
from workers.context import JobContext

app = App("recording")


def _append(kind: str, line: str) -> None:
    directory = Path(os.environ["RECORDING_DIR"])
    with (directory / f"{kind}-{os.getpid()}.log").open("a") as out:
        out.write(line + "\n")
        out.flush()


@app.job("noop")
def noop(ctx: JobContext, payload: dict[str, Any]) -> None:
    # Random durations make acks arrive out of offset order.
    max_ms = float(os.environ.get("RECORDING_MAX_MS", "5"))
    time.sleep(random.uniform(0, max_ms) / 1000)
    _append("runs", f"{ctx.job_id} {ctx.attempt}")


@app.on_settled
def settled(ctx: JobContext, outcome: str, accepted: bool) -> None:
    if accepted and outcome == "ack":
        _append("acks", ctx.job_id)


def read_events(directory: Path, kind: str) -> list[str]:
    """Every job id recorded as ``kind`` by any process (partial last lines skipped)."""
    ids: list[str] = []
    for path in directory.glob(f"{kind}-*.log"):
        for line in path.read_text().splitlines():
            if line.strip():
                ids.append(line.split()[0])
    return ids
