"""The raw Kafka limit: a bare confluent-kafka producer and consumer loop, nothing else.

No leases, no RPC, no decoding: the consumer counts records and commits every
1,000 (asynchronously, with a final synchronous commit), with the same client
settings our leasekeeper uses (``jobcore.kafka``). The producer sends the very
records of our backlog again (read into memory first, then timed), so both
sides of the comparison carry the same bytes. Run as its own process so it is
pinned and measured like any other client; prints one JSON line.

    python -m benchmarks.rawloop produce --bootstrap B --topic T --source S --count N
    python -m benchmarks.rawloop consume --bootstrap B --topic T --group G --count N
"""

from __future__ import annotations

import argparse
import json
import os
import time

from jobcore.kafka import KafkaSettings, make_consumer, make_producer, produce_reliably

COMMIT_EVERY = 1_000


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


def read_all(settings: KafkaSettings, topic: str, count: int) -> list[tuple[bytes, bytes]]:
    """The (key, value) of the first ``count`` records of ``topic``: the bytes to produce again."""
    consumer = make_consumer(settings, f"raw-reader-{os.getpid()}")
    consumer.subscribe([topic])
    records: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + 300
    while len(records) < count and time.monotonic() < deadline:
        for message in consumer.consume(1000, timeout=0.5):
            if message.error() is None:
                records.append((message.key() or b"", message.value() or b""))
    consumer.close()
    return records[:count]


def produce(
    settings: KafkaSettings, topic: str, records: list[tuple[bytes, bytes]]
) -> dict[str, float]:
    producer = make_producer(settings)
    producer.list_topics(topic, timeout=10)
    started, cpu = time.monotonic(), _cpu()
    for key, value in records:
        produce_reliably(producer, topic, key=key, value=value)
    remaining = producer.flush(120)
    seconds = time.monotonic() - started
    return {"records": len(records) - remaining, "seconds": seconds, "cpu_s": _cpu() - cpu}


def consume(settings: KafkaSettings, topic: str, group: str, count: int) -> dict[str, float]:
    consumer = make_consumer(settings, group)
    consumer.subscribe([topic])
    seen = 0
    since_commit = 0
    first = cpu = 0.0
    deadline = time.monotonic() + 600
    while seen < count and time.monotonic() < deadline:
        batch = consumer.consume(1000, timeout=0.5)
        good = [m for m in batch if m.error() is None]
        if good and not first:
            first, cpu = time.time(), _cpu()
        for message in good:
            consumer.store_offsets(message)
        seen += len(good)
        since_commit += len(good)
        if since_commit >= COMMIT_EVERY:
            consumer.commit(asynchronous=True)
            since_commit = 0
    consumer.commit(asynchronous=False)
    ended = time.time()
    result = {"records": seen, "seconds": ended - first, "cpu_s": _cpu() - cpu, "first": first}
    consumer.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rawloop")
    parser.add_argument("mode", choices=("produce", "consume"))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--group", default="raw")
    parser.add_argument("--source", help="produce: copy the records of this topic")
    args = parser.parse_args()
    settings = KafkaSettings(bootstrap=args.bootstrap, client_id="bench-raw")
    if args.mode == "produce":
        records = read_all(settings, args.source or args.topic, args.count)
        out = produce(settings, args.topic, records)
    else:
        out = consume(settings, args.topic, args.group, args.count)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
