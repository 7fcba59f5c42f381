"""Writes the noisy scenario's flood from a process of its own, undiverted, as a
backfill tool or another service would while the queue runs::

    python -m benchmarks.scenarios.flood_writer BOOTSTRAP QUEUE COUNT
"""

from __future__ import annotations

import sys

from benchmarks.context import SCHEMA_DIR
from benchmarks.scenarios.noisy_relay import flood_request
from jobcore.kafka import KafkaSettings
from producer import FloodPolicy, JobProducer
from schemas.codec import SchemaRegistry


def main() -> None:
    bootstrap, queue, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    registry = SchemaRegistry(extra_dirs=[SCHEMA_DIR])
    settings = KafkaSettings(bootstrap=bootstrap)
    with JobProducer(settings, registry=registry, flood=FloodPolicy.off()) as producer:
        producer.enqueue_batch(flood_request(queue, n) for n in range(count))


if __name__ == "__main__":
    main()
