"""Micro-benchmarks of the hot paths, in one process, without Kafka.

A regression in one of them shows in seconds here, where the whole-system
scenarios take minutes and mix every cost together. Each row but the RPC ones is
the cost of one job through one path, in microseconds of wall time on an
otherwise idle core:

- envelope read: decoding one job envelope (what the leasekeeper did per record
  before issue 12, and still does for records without job headers);
- header read: the leasekeeper reading the same job's fields from its Kafka key and
  headers (``schemas.job_headers``), what it does per record now;
- claim / settle: the lease engine leasing jobs to a worker and acking them,
  with a real RocksDB store, in batches of ``BATCH`` as the RPC carries them;
- worker dispatch: a claimed batch of no-op ``def`` jobs handed to the handler
  threads and run, next to the ``ThreadPoolExecutor`` (one future a job) it
  replaced;
- RPC round trip: one empty Settle from a worker's client to the leasekeeper's
  gRPC server over a Unix socket, both in this process: the CPU one call costs
  both ends (all threads, gRPC's own included), whatever it carries. Back to
  back, and one call every 5 ms, as a worker settles at a few hundred jobs a
  second, where every call wakes sleeping threads on both sides. These rows are
  per call, not per job, and the only ones that use a socket.

``python -m benchmarks.micro [--jobs N]`` prints the rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from leasekeeper.core.leases import Grant, SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.rpc.listen import ChannelSecurity
from leasekeeper.rpc.server import start_rpc_server
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job
from schemas.job_headers import JobHead, job_headers, read_head
from workers.client import LeaseKeeperClient
from workers.handler_threads import HandlerThreads

BATCH = 100
THREADS = 8
# A call every this many seconds: how often a worker settles at a few hundred jobs/s.
RPC_SPACING_S = 0.005
RPC_SPACED_CALLS = 400
TP = TopicPart("jobs.micro", 0)


def _job(n: int) -> Job:
    return Job(
        job_id=f"job-{n}",
        queue="micro",
        tenant_id=f"t{n % 20}",
        type="noop",
        payload=b"x" * 100,
        created_at_ms=0,
    )


def _per_job_us(jobs: int, run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return round((time.perf_counter() - started) / jobs * 1e6, 2)


def envelope_read(jobs: int) -> float:
    codec = EnvelopeCodec(SchemaRegistry())
    envelopes = [codec.encode(_job(n)) for n in range(jobs)]
    return _per_job_us(jobs, lambda: [codec.decode(e) for e in envelopes])


def header_read(jobs: int) -> float:
    codec = EnvelopeCodec(SchemaRegistry())
    records = []
    for n in range(jobs):
        job = _job(n)
        value = codec.encode(job)
        # As confluent-kafka hands them over: a fresh list of (name, bytes) tuples.
        records.append((job.tenant_id.encode(), job_headers(job, value), value))
    return _per_job_us(jobs, lambda: [read_head(k, h, v) for k, h, v in records])


def _head(codec: EnvelopeCodec, n: int) -> tuple[JobHead, bytes]:
    job = _job(n)
    value = codec.encode(job)
    head = read_head(job.tenant_id.encode(), job_headers(job, value), value)
    assert head is not None
    return head, value


def claim_and_settle(jobs: int) -> tuple[float, float]:
    """Offer ``jobs`` to an engine, claim them all, then ack them all; (claim, settle) µs."""
    with tempfile.TemporaryDirectory(prefix="micro-") as state:
        engine = LeaseEngine(store=LeaseStore(Path(state)), config=EngineConfig())
        engine.partitions.assign(TP, 0)
        codec = EnvelopeCodec(SchemaRegistry())
        for n in range(jobs):
            head, value = _head(codec, n)
            engine.fetch.offer(TP, n, head, value)
        grants: list[Grant] = []

        def claim_all() -> None:
            for _ in range(jobs // BATCH):
                grants.extend(engine.workers.claim("w", BATCH, 0))

        claim_us = _per_job_us(jobs, claim_all)
        acks = [
            Settlement(lease_id=g.lease_id, token=g.token, outcome=SettleKind.ACK) for g in grants
        ]
        batches = [acks[i : i + BATCH] for i in range(0, len(acks), BATCH)]
        settle_us = _per_job_us(jobs, lambda: [engine.workers.settle(b) for b in batches])
        engine.close()
        return claim_us, settle_us


def dispatch_threads(jobs: int) -> float:
    done = threading.Semaphore(0)
    threads: HandlerThreads[int] = HandlerThreads(THREADS, lambda _: done.release(), name="micro")
    threads.start()

    def run() -> None:
        for start in range(0, jobs, BATCH):
            threads.submit(range(start, min(jobs, start + BATCH)))
        for _ in range(jobs):
            done.acquire()

    try:
        return _per_job_us(jobs, run)
    finally:
        threads.shutdown(wait=True)


def dispatch_executor(jobs: int) -> float:
    done = threading.Semaphore(0)
    with ThreadPoolExecutor(THREADS) as pool:

        def run() -> None:
            for n in range(jobs):
                pool.submit(lambda _: done.release(), n)
            for _ in range(jobs):
                done.acquire()

        return _per_job_us(jobs, run)


def rpc_round_trip(calls: int) -> tuple[float, float]:
    """CPU µs (client and server, every thread) per empty Settle: (back to back, spaced)."""
    with tempfile.TemporaryDirectory(prefix="micro-") as state:
        engine = LeaseEngine(store=LeaseStore(Path(state)), config=EngineConfig())
        listen = f"unix:{Path(state) / 'lk.sock'}"
        server = start_rpc_server(
            engine=engine, snapshot=dict, listen=listen, security=ChannelSecurity()
        )
        client = LeaseKeeperClient(listen, worker_id="micro")
        try:
            for _ in range(100):
                client.settle([])  # connected and warm
            back_to_back = _cpu_per_call_us(calls, lambda: client.settle([]))
            idle = _cpu_per_call_us(RPC_SPACED_CALLS, lambda: None, RPC_SPACING_S)
            spaced = _cpu_per_call_us(RPC_SPACED_CALLS, lambda: client.settle([]), RPC_SPACING_S)
            return back_to_back, round(max(0.0, spaced - idle), 2)
        finally:
            client.close()
            server.stop(0).wait()
            engine.close()


def _cpu_per_call_us(calls: int, call: Callable[[], object], spacing_s: float = 0.0) -> float:
    started = time.process_time()
    for _ in range(calls):
        call()
        if spacing_s:
            time.sleep(spacing_s)
    return round((time.process_time() - started) / calls * 1e6, 2)


def measure(jobs: int) -> list[dict[str, Any]]:
    claim_us, settle_us = claim_and_settle(jobs)
    rows = [
        ("envelope read (Avro decode)", envelope_read(jobs)),
        ("header read (key and Kafka headers)", header_read(jobs)),
        (f"claim (batches of {BATCH}, RocksDB store)", claim_us),
        (f"settle: ack (batches of {BATCH})", settle_us),
        (f"worker dispatch: handler threads ({THREADS})", dispatch_threads(jobs)),
        (f"worker dispatch: ThreadPoolExecutor ({THREADS}), before", dispatch_executor(jobs)),
    ]
    back_to_back, spaced = rpc_round_trip(max(1_000, jobs // 10))
    rpc = "RPC round trip, empty Settle, CPU per call (both ends)"
    rows += [
        (f"{rpc}, back to back", back_to_back),
        (f"{rpc}, one every {RPC_SPACING_S * 1000:g} ms", spaced),
    ]
    return [
        {"system": "micro", "variant": name, "us_per_job": us, "jobs": jobs} for name, us in rows
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    args = parser.parse_args()
    print(json.dumps(measure(args.jobs)))


if __name__ == "__main__":
    main()
