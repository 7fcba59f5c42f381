"""KIP-932 share-group consumers: Kafka's own queue semantics, one process of N threads.

Each thread owns one ``ShareConsumer`` (the client is not thread-safe), runs
the "handler" (nothing, or a sleep), and acknowledges every record explicitly;
acknowledgements ride on the next poll. Runs until SIGTERM, then closes each
consumer (which commits what is still pending).

    python -m benchmarks.sharegroup --bootstrap B --topic T --group G --threads 8 --sleep-ms 10
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from types import FrameType

from benchmarks import progress
from jobcore.kafka import KafkaSettings, make_share_consumer


def consume(settings: KafkaSettings, args: argparse.Namespace, halt: threading.Event) -> None:
    overrides = {"max.poll.records": args.max_poll_records} if args.max_poll_records else {}
    consumer = make_share_consumer(settings, args.group, **overrides)
    consumer.subscribe([args.topic])
    sleep_s = args.sleep_ms / 1000
    try:
        while not halt.is_set():
            for message in consumer.poll(0.5):
                if message.error() is not None:
                    continue
                if sleep_s:
                    time.sleep(sleep_s)
                consumer.acknowledge(message)
                progress.hit()
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sharegroup")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sleep-ms", type=float, default=0.0)
    parser.add_argument("--max-poll-records", type=int, default=0)
    args = parser.parse_args()
    settings = KafkaSettings(bootstrap=args.bootstrap, client_id="bench-share")
    halt = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        halt.set()

    signal.signal(signal.SIGTERM, on_term)
    threads = [
        threading.Thread(target=consume, args=(settings, args, halt), name=f"share-{i}")
        for i in range(args.threads)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
