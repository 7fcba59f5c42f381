"""Worker apps the benchmark runs under ``workers run``: one per kind of load.

All handle the ``bench_noop`` job type (``benchmarks/schemas``). Handlers are
plain functions on the worker's thread pool, the same execution model the
peers get (threads), so "10 ms of I/O" means the same thing everywhere.
"""

from __future__ import annotations

import os
import time
from typing import Any

from benchmarks import progress
from workers.app import App
from workers.context import JobContext

JOB_TYPE = "bench_noop"
ENV_DELAY_MS = "BENCH_DELAY_MS"
ENV_WARMUP_N = "BENCH_WARMUP_N"

noop_app = App("bench-noop")
io_app = App("bench-io")
slow_app = App("bench-slow")
latency_app = App("bench-latency")
scheduled_app = App("bench-scheduled")
recovery_app = App("bench-recovery")


@noop_app.job(JOB_TYPE)
def noop(ctx: JobContext, payload: dict[str, Any]) -> None:
    progress.hit()


@io_app.job(JOB_TYPE)
def io_10ms(ctx: JobContext, payload: dict[str, Any]) -> None:
    time.sleep(0.010)
    progress.hit()


@slow_app.job(JOB_TYPE)
def io_100ms(ctx: JobContext, payload: dict[str, Any]) -> None:
    time.sleep(0.100)
    progress.hit()


def _measured(payload: dict[str, Any]) -> bool:
    """Warm-up jobs (``n`` below ``$BENCH_WARMUP_N``) are run but not measured."""
    return int(payload["n"]) >= int(os.environ.get(ENV_WARMUP_N, "0"))


@latency_app.job(JOB_TYPE)
def record_start(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Enqueue-to-start: the envelope's creation time against the handler's first line."""
    now_ms = time.time() * 1000
    progress.hit(now_ms - ctx.created_at_ms if _measured(payload) else None)


@scheduled_app.job(JOB_TYPE)
def record_lateness(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Start minus due time; every job of a run waits ``$BENCH_DELAY_MS`` after its creation.

    The producer rounds the due time up to the millisecond and the creation time
    down, so this may read up to 1 ms late; it never hides lateness.
    """
    now_ms = time.time() * 1000
    due_ms = ctx.created_at_ms + float(os.environ.get(ENV_DELAY_MS, "0"))
    progress.hit(now_ms - due_ms if _measured(payload) else None)


# -- recovery: every start and every confirmed ack, written before anything else -----


def _event(kind: str, job_id: str, attempt: int) -> None:
    """One line straight to the kernel (O_APPEND), so it survives a ``kill -9`` right after."""
    directory = os.environ[progress.ENV_DIR]
    line = f"{kind} {job_id} {attempt} {os.getpid()} {time.time():.4f}\n".encode()
    fd = os.open(f"{directory}/{os.getpid()}.events", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@recovery_app.job(JOB_TYPE)
def recorded_100ms(ctx: JobContext, payload: dict[str, Any]) -> None:
    _event("start", ctx.job_id, ctx.attempt)
    time.sleep(0.100)
    progress.hit()


@recovery_app.on_settled
def settled(ctx: JobContext, outcome: str, accepted: bool) -> None:
    if accepted and outcome == "ack":
        _event("ack", ctx.job_id, ctx.attempt)


# -- noisy neighbour: start latency per group (flooder, other tenants, critical) ------

noisy_app = App("bench-noisy")
# The group travels in the payload's n (group * NOISY_GROUP_SCALE + a counter); the
# sample is group * NOISY_GROUP_SCALE + the start latency in ms.
NOISY_GROUP_SCALE = 10_000_000


@noisy_app.job(JOB_TYPE)
def record_group_start(ctx: JobContext, payload: dict[str, Any]) -> None:
    now_ms = time.time() * 1000
    group = int(payload["n"]) // NOISY_GROUP_SCALE
    latency = min(NOISY_GROUP_SCALE - 1.0, max(0.0, now_ms - ctx.created_at_ms))
    progress.hit(group * NOISY_GROUP_SCALE + latency)
    if delay_ms := float(os.environ.get(ENV_DELAY_MS, "0")):
        time.sleep(delay_ms / 1000)  # an I/O job: waits, without CPU, after its start


# A 100-byte result (its UTF-8 JSON), as a handler returning a URL and a size would:
# what returning a value costs a drain (``benchmarks.results_cost``).
RESULT_100_BYTES = {"url": "https://files.example/" + "r" * 52, "bytes": 1_048_576}
result_app = App("bench-result")


@result_app.job(JOB_TYPE)
def returns_100_bytes(ctx: JobContext, payload: dict[str, Any]) -> dict[str, object]:
    progress.hit()
    return RESULT_100_BYTES
