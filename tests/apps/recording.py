"""A worker app for system tests: records every start, every run and every ack.

Each process appends to its own files in ``$RECORDING_DIR`` (one line per
event, written before the handler returns), so a test can tell which jobs
started and ran where, how often, at which attempt, and which acks the
leasekeeper confirmed or refused.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers import App, JobContext, Permanent, Retry

app = App("recording")
SCHEMAS = Path(__file__).with_name("schemas")


def _directory() -> Path:
    return Path(os.environ["RECORDING_DIR"])


def _append(kind: str, *fields: object) -> None:
    with (_directory() / f"{kind}-{os.getpid()}.log").open("a") as out:
        out.write(" ".join(str(f) for f in fields) + "\n")
        out.flush()


@app.job("noop")
def noop(ctx: JobContext, payload: dict[str, Any]) -> None:
    # Random durations make acks arrive out of offset order.
    max_ms = float(os.environ.get("RECORDING_MAX_MS", "5"))
    _append("starts", ctx.job_id, ctx.attempt, time.time())
    time.sleep(random.uniform(0, max_ms) / 1000)
    _append("runs", ctx.job_id, ctx.attempt, time.time())


@app.job("task")
def task(ctx: JobContext, payload: dict[str, Any]) -> None:
    _append("starts", ctx.job_id, ctx.attempt, time.time())
    if ctx.attempt <= payload["exit_attempts"]:
        os._exit(3)  # a poison pill: the worker process dies mid-job
    if ctx.attempt <= payload["hang_attempts"]:
        while True:  # never returns; only timeout_s stops it
            time.sleep(1)
    if payload["fail_while_broken"] and (_directory() / "broken").exists():
        raise Permanent("the dependency is broken")
    if ctx.attempt <= payload["fail_attempts"]:
        _append("failures", ctx.job_id, ctx.attempt, time.time())
        if payload["permanent"]:
            raise Permanent(f"attempt {ctx.attempt} refused for good")
        if payload["retry_after_ms"]:
            raise Retry("come back later", after=payload["retry_after_ms"] / 1000)
        raise ConnectionError(f"attempt {ctx.attempt} failed")
    time.sleep(payload["sleep_ms"] / 1000)
    _append("runs", ctx.job_id, ctx.attempt, time.time())


@app.on_settled
def settled(ctx: JobContext, outcome: str, accepted: bool) -> None:
    if outcome == "ack":
        _append("acks" if accepted else "refused", ctx.job_id, ctx.attempt, time.time())


@dataclass(frozen=True)
class Event:
    job_id: str
    attempt: int
    at: float
    pid: int


def read_log(directory: Path, kind: str) -> list[Event]:
    """Every ``kind`` event of every process (a torn last line is skipped)."""
    events = []
    for path in directory.glob(f"{kind}-*.log"):
        pid = int(path.stem.rsplit("-", 1)[1])
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                events.append(Event(parts[0], int(parts[1]), float(parts[2]), pid))
    return events


def count_log(directory: Path, kind: str) -> Counter[int]:
    """How many ``kind`` events each process wrote (a torn last line is not counted).
    Cheap enough to poll while the system runs: a poll that parsed every event took
    seconds on a loaded machine, and the files it read second had grown meanwhile."""
    counts: Counter[int] = Counter()
    for path in directory.glob(f"{kind}-*.log"):
        text = path.read_bytes()
        counts[int(path.stem.rsplit("-", 1)[1])] = text.count(b"\n")
    return counts


def read_events(directory: Path, kind: str) -> list[str]:
    """The job id of every ``kind`` event."""
    return [event.job_id for event in read_log(directory, kind)]
