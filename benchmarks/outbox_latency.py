"""Commit-to-Kafka latency of the transactional outbox, its drain rate, and what the
relay's crash marks cost.

Run against a broker (default ``KAFKA_BOOTSTRAP``); starts its own private
PostgreSQL from Debian's packages, as the peer benchmark does::

    python -m benchmarks.outbox_latency --jobs 2000 --rate 100 --out benchmarks/results/outbox.json

Latency: one job per transaction, paced at ``--rate``; a ``producer outbox relay``
process (woken by LISTEN/NOTIFY) moves each to Kafka, where a consumer notes when
it can read it. Latency is commit returned -> record read by a consumer, so it
includes the consumer's fetch wait. Drain: ``--drain`` rows staged at once, then
one relay (in this process) moves them; rows/s. Marks: the two single-row updates
the relay adds per batch, timed on their own. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.peers.servers import PostgresServer
from benchmarks.procs import Pinning
from jobcore.kafka import (
    OFFSET_BEGINNING,
    KafkaSettings,
    TopicPartition,
    make_admin,
    make_consumer,
)
from jobcore.topics import QueueTopics
from producer import JobProducer, JobRequest, ensure_queue_topics
from producer.outbox import Outbox, OutboxRelay, RelayConfig, init_schema
from producer.outbox.relay import _FINISH_BATCH, _MARK_INFLIGHT

PARTITIONS = 3
PAYLOAD = {"order_id": 7, "email": "a@example.com", "amount_cents": 1999}


def main() -> None:
    args = _parse()
    settings = KafkaSettings(bootstrap=args.bootstrap, client_id="outbox-bench")
    server = PostgresServer(Pinning(servers=None, clients=None), allow_install=True).start()
    queue = f"outboxbench{uuid.uuid4().hex[:8]}"
    try:
        ensure_queue_topics(settings, queue, partitions=PARTITIONS)
        init_schema(server.dsn)
        result = {
            "latency": _latency(server.dsn, settings, queue, args.jobs, args.rate),
            "drain": _drain(server.dsn, settings, queue, args.drain),
            "marks_ms_per_batch": _marks_cost(server.dsn),
        }
    finally:
        server.stop()
        admin = make_admin(settings)
        names = [t for t in admin.list_topics(timeout=10).topics if queue in t]
        if names:
            admin.delete_topics(names)
    line = json.dumps(result)
    print(line)
    if args.out:
        Path(args.out).write_text(line + "\n")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=100.0, help="transactions per second")
    parser.add_argument("--drain", type=int, default=20000)
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    parser.add_argument("--out", default=None)
    return parser.parse_args()


def _latency(
    dsn: str, settings: KafkaSettings, queue: str, jobs: int, rate: float
) -> dict[str, Any]:
    seen: dict[str, float] = {}
    stop = threading.Event()
    reader = threading.Thread(target=_read, args=(settings, queue, seen, stop), daemon=True)
    reader.start()
    relay = _start_relay(dsn, settings)
    try:
        committed = _stage_paced(dsn, queue, jobs, rate)
        deadline = time.monotonic() + 120
        while len(seen) < jobs and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        relay.terminate()
        relay.wait(30)
        stop.set()
        reader.join(10)
    ms = sorted((seen[i] - t) * 1000 for i, t in committed.items() if i in seen)
    return {
        "jobs": jobs,
        "rate_per_s": rate,
        "received": len(ms),
        "p50_ms": round(statistics.median(ms), 1),
        "p99_ms": round(ms[int(len(ms) * 0.99) - 1], 1),
        "max_ms": round(ms[-1], 1),
    }


def _start_relay(dsn: str, settings: KafkaSettings) -> subprocess.Popen[bytes]:
    cmd = [
        str(Path(sys.executable).with_name("producer")), "outbox", "relay", "--dsn", dsn,
        "--bootstrap", settings.bootstrap, "--log-level", "WARNING",
    ]  # fmt: skip
    relay = subprocess.Popen(cmd)
    with psycopg.connect(dsn, autocommit=True) as conn:  # active: it holds the lock
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            row = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
            if (found := row.fetchone()) is not None and found[0]:
                break
            time.sleep(0.05)
    return relay


def _stage_paced(dsn: str, queue: str, jobs: int, rate: float) -> dict[str, float]:
    outbox = Outbox()
    committed: dict[str, float] = {}
    start = time.monotonic()
    with psycopg.connect(dsn) as conn:
        for n in range(jobs):
            delay = start + n / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            job_id = outbox.stage(conn, _request(queue, n))
            conn.commit()
            committed[job_id] = time.time()
    return committed


def _read(
    settings: KafkaSettings, queue: str, seen: dict[str, float], stop: threading.Event
) -> None:
    consumer = make_consumer(settings, f"outbox-bench-{uuid.uuid4().hex}")
    topic = QueueTopics(queue=queue).ready
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    try:
        while not stop.is_set():
            for msg in consumer.consume(500, timeout=0.1):
                job_id = dict(msg.headers() or []).get("job_id")
                if msg.error() is None and isinstance(job_id, bytes):
                    seen.setdefault(job_id.decode(), time.time())
    finally:
        consumer.close()


def _drain(dsn: str, settings: KafkaSettings, queue: str, rows: int) -> dict[str, Any]:
    outbox = Outbox()
    with psycopg.connect(dsn) as conn:
        for first in range(0, rows, 1000):
            outbox.stage_many(conn, [_request(queue, n) for n in range(first, first + 1000)])
        conn.commit()
    stop = threading.Event()
    with JobProducer(settings) as producer:
        relay = OutboxRelay(RelayConfig(dsn=dsn, batch=500), producer, settings)
        thread = threading.Thread(target=relay.run, args=(stop,), daemon=True)
        started = time.monotonic()
        cpu = time.process_time()
        thread.start()
        with psycopg.connect(dsn, autocommit=True) as conn:
            while _waiting(conn):
                time.sleep(0.05)
        elapsed, cpu_s = time.monotonic() - started, time.process_time() - cpu
        stop.set()
        thread.join(30)
    return {
        "rows": rows,
        "batch": 500,
        "seconds": round(elapsed, 2),
        "rows_per_s": round(rows / elapsed),
        "bench_process_cpu_s_per_1000": round(cpu_s / rows * 1000, 3),
    }


def _waiting(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM job_outbox").fetchone()
    return int(row[0]) if row else 0


def _marks_cost(dsn: str, rounds: int = 200) -> float:
    """The statements the crash marks add per batch, with a realistic marks value."""
    marks = json.dumps({f"jobs.q.{t}": {str(p): 10**6 for p in range(12)} for t in range(7)})
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        for n in range(rounds):
            conn.execute(_MARK_INFLIGHT, (n, marks))
            conn.execute(_FINISH_BATCH, (marks,))
        return round((time.perf_counter() - started) / rounds * 1000, 3)


def _request(queue: str, n: int) -> JobRequest:
    return JobRequest(
        queue=queue, type="send_receipt", payload={**PAYLOAD, "order_id": n}, tenant_id=f"t{n % 50}"
    )


if __name__ == "__main__":
    main()
