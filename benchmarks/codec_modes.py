"""What registry mode adds to a drain: the decoding a drained job costs, per mode.

A drained job is decoded three times (the leasekeeper's envelope, then the worker's
envelope and payload); everything else in a drain is the same in both modes. This
measures that decoding in CPU-s per 1,000 jobs for the file registry and for
registry mode with cached lookups, interleaved in the same run, median of 3, and prints the
difference as a share of the drain's client CPU per job from BENCHMARKS.md.

    python -m benchmarks.codec_modes --schema-registry URL [--jobs 50000]

The registry must hold the schemas (``producer schemas register --queue bench``).
"""

from __future__ import annotations

import argparse
import statistics
import time

from jobcore.schema_registry import RegistrySettings, open_registry
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job

DRAIN_CLIENT_MS_PER_JOB = 0.121  # leasekeeper + workers, 2 workers, BENCHMARKS.md


def _records(codec: EnvelopeCodec, jobs: int) -> list[bytes]:
    payload = codec.encode_payload("noop", {"n": 1})
    return [
        codec.encode(
            Job(
                job_id=f"j{i}", queue="bench", tenant_id="t", type="noop",
                payload=payload, created_at_ms=1,
            )
        )
        for i in range(jobs)
    ]  # fmt: skip


def _drain_decode_cpu_s(codec: EnvelopeCodec, records: list[bytes]) -> float:
    start = time.process_time()
    for data in records:
        codec.decode(data)  # the leasekeeper
        job = codec.decode(data)  # the worker: envelope, then payload
        codec.decode_payload(job.type, job.payload)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schema-registry", required=True)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    settings = RegistrySettings(url=args.schema_registry, cache_dir=None)
    registry = open_registry(settings, queues=["bench"], attempts=1)
    try:
        modes = {"file": EnvelopeCodec(SchemaRegistry()), "registry": EnvelopeCodec(registry)}
        records = {name: _records(codec, args.jobs) for name, codec in modes.items()}
        for name, codec in modes.items():  # warm the caches: "cached lookups"
            _drain_decode_cpu_s(codec, records[name][:10])
        # Interleaved (file, registry, file, ...): a busy neighbour slows both alike.
        spent: dict[str, list[float]] = {name: [] for name in modes}
        for _ in range(args.rounds):
            for name, codec in modes.items():
                spent[name].append(_drain_decode_cpu_s(codec, records[name]))
        cost = {name: statistics.median(s) * 1000 / args.jobs for name, s in spent.items()}
    finally:
        registry.close()
    delta = cost["registry"] - cost["file"]
    print(f"decoding per 1,000 drained jobs (CPU-s, median of {args.rounds}, {args.jobs} jobs):")
    print(f"  file registry: {cost['file']:.5f}   registry mode: {cost['registry']:.5f}")
    print(
        f"  registry - file: {delta:+.5f} CPU-s per 1,000 jobs = "
        f"{100 * delta / DRAIN_CLIENT_MS_PER_JOB:+.1f}% of the drain's client CPU"
    )


if __name__ == "__main__":
    main()
