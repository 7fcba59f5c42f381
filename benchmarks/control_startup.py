"""Start-up cost of the dedupe topic: how long a leasekeeper's control feed takes to
read N dedupe keys, and how much memory they hold.

Run against a broker (default ``KAFKA_BOOTSTRAP``)::

    python -m benchmarks.control_startup --keys 1000000

It creates a throw-away queue, produces N distinct dedupe claims (all within the
window, so none is pruned), then, in a fresh process so the producer's memory is
not counted, times ``ControlFeed.catch_up()`` and the growth of its resident set.
The topics are deleted afterwards. Prints one JSON line and, with ``--out``,
writes it to a file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from jobcore.control import DedupeClaim
from jobcore.kafka import KafkaSettings, make_admin, make_producer, produce_reliably
from jobcore.topics import QueueTopics
from leasekeeper.core.control_state import ControlState
from leasekeeper.kafka.control_feed import ControlFeed
from producer import ensure_queue_topics


def rss_bytes() -> int:
    """Resident set size of this process (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def produce_claims(settings: KafkaSettings, topics: QueueTopics, keys: int) -> float:
    """N distinct claims on the dedupe topic; returns the seconds it took."""
    producer = make_producer(settings, **{"linger.ms": 50, "batch.size": 1_000_000})
    now_ms = int(time.time() * 1000)
    started = time.monotonic()
    for i in range(keys):
        claim = DedupeClaim(
            tenant_id=f"tenant-{i % 100}",
            dedupe_key=f"report@2026-11-30T{i:08d}",
            job_id=uuid.UUID(int=i).hex,
            seen_at_ms=now_ms,
        )
        produce_reliably(producer, topics.dedupe, key=claim.key, value=claim.encode())
    if producer.flush(120) != 0:
        raise RuntimeError("dedupe claims not delivered within 120 s")
    return time.monotonic() - started


def measure(settings: KafkaSettings, topics: QueueTopics) -> dict[str, object]:
    """Catch-up time and memory of a fresh control feed (run in its own process)."""
    before = rss_bytes()
    state = ControlState()
    feed = ControlFeed(settings=settings, topics=topics, state=state)
    try:
        feed.catch_up(timeout_s=600)
        snap = feed.snapshot()
    finally:
        feed.close()
    after = rss_bytes()
    return {
        "catch_up_s": snap.catch_up_s,
        "records": snap.catch_up_records,
        "dedupe_claims": snap.dedupe_claims,
        "rss_before_mib": round(before / 2**20, 1),
        "rss_after_mib": round(after / 2**20, 1),
        "rss_growth_mib": round((after - before) / 2**20, 1),
        "bytes_per_key": round((after - before) / max(1, snap.dedupe_claims)),
    }


def run(settings: KafkaSettings, keys: int) -> dict[str, object]:
    topics = QueueTopics(queue=f"bench-dedupe-{uuid.uuid4().hex[:8]}")
    ensure_queue_topics(settings, topics.queue, partitions=1)
    try:
        produce_s = produce_claims(settings, topics, keys)
        child = subprocess.run(
            [sys.executable, "-m", "benchmarks.control_startup", "--measure", topics.queue],
            env={**os.environ, "KAFKA_BOOTSTRAP": settings.bootstrap},
            check=True,
            capture_output=True,
            text=True,
        )
        result: dict[str, object] = json.loads(child.stdout.strip().splitlines()[-1])
    finally:
        admin = make_admin(settings)
        names = [topics.ready, topics.dlq, topics.control, topics.dedupe]
        names += [n for n in admin.list_topics(timeout=10).topics if n.startswith(topics.ready)]
        for future in admin.delete_topics(sorted(set(names)), operation_timeout=30).values():
            future.result(timeout=30)
    return {"keys": keys, "produce_s": round(produce_s, 2), **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP"))
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--measure", metavar="QUEUE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.bootstrap:
        parser.error("no broker: pass --bootstrap HOST:PORT or set KAFKA_BOOTSTRAP")
    settings = KafkaSettings(bootstrap=args.bootstrap, client_id="bench-control-startup")
    if args.measure:
        print(json.dumps(measure(settings, QueueTopics(queue=args.measure))))
        return
    result = run(settings, args.keys)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
