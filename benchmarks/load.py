"""Jobs for our queue: the pre-loaded backlog and a paced stream, through the real producer.

Loading goes through ``JobProducer`` (validation, Avro, ``acks=all``), so the
enqueue rate it reports is the one a user gets, and the records every drain
reads are byte for byte what production would write.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

from benchmarks.apps import JOB_TYPE
from jobcore.kafka import KafkaSettings
from jobcore.schema_registry import RegistrySettings, open_registry
from producer import FloodPolicy, JobProducer, JobRequest, ensure_queue_topics
from producer.request import build_job
from schemas.codec import EnvelopeCodec, SchemaRegistry

CHUNK = 20_000


def blob(payload_bytes: int) -> str:
    """Filler that brings the Avro payload (a long plus a string) to about ``payload_bytes``."""
    return "x" * max(0, payload_bytes - 4)


class Preloader:
    """Owns one queue and appends jobs to it, spread over tenants round-robin."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        queue: str,
        partitions: int,
        tenants: int,
        payload_bytes: int,
        schema_dir: Path,
        registry_url: str | None = None,
        ordering_keys: int = 0,
    ) -> None:
        self.queue = queue
        # Jobs carry one of this many ordering keys, round-robin (0: none).
        self.ordering_keys = ordering_keys
        self.tenants = tenants
        self.blob = blob(payload_bytes)
        self.registry = (
            registry_mode(registry_url, queue, schema_dir)
            if registry_url
            else SchemaRegistry(extra_dirs=[schema_dir])
        )
        ensure_queue_topics(settings, queue, partitions=partitions)
        # A preloaded backlog is a drain's load, not a flood to divert: it stays in the
        # ready topic, whose committed offsets the drains' clocks stop at.
        self.producer = JobProducer(settings, registry=self.registry, flood=FloodPolicy.off())
        self.loaded = 0

    def requests(self, start: int, count: int) -> Iterator[JobRequest]:
        for n in range(start, start + count):
            yield JobRequest(
                queue=self.queue,
                type=JOB_TYPE,
                payload={"n": n, "blob": self.blob},
                tenant_id=f"tenant-{n % self.tenants}",
                ordering_key=f"key-{n % self.ordering_keys}" if self.ordering_keys else None,
            )

    def load(self, count: int, keep_ids: bool = False) -> list[str]:
        """Append ``count`` jobs, returning once the broker acknowledged every one.

        ``keep_ids`` returns their job ids (the recovery scenario checks none is lost).
        """
        done = 0
        ids: list[str] = []
        while done < count:
            chunk = min(CHUNK, count - done)
            sent = self.producer.enqueue_batch(self.requests(self.loaded, chunk))
            if keep_ids:
                ids.extend(sent)
            self.loaded += chunk
            done += chunk
        return ids

    def paced(
        self, rate: float, seconds: float, delay: float | None = None, limit: int | None = None
    ) -> list[str]:
        """Enqueue at ``rate`` jobs/s for ``seconds`` (10 ms ticks), or until ``limit``
        jobs were sent; returns the delivered ids.

        ``delay``: every job is due that many seconds after it is enqueued.
        """
        tick = 0.01
        futures: list[Future[str]] = []
        # The load generator's own full collections (its futures pile up: hundreds of ms
        # each here) would stall the pacing, then send a second's jobs at once: a burst
        # measured as the system's latency. No collection while pacing.
        gc.disable()
        try:
            started = time.monotonic()
            while (elapsed := time.monotonic() - started) < seconds:
                if limit is not None and len(futures) >= limit:
                    break
                due = max(0, int(rate * elapsed) - len(futures))
                if limit is not None:
                    due = min(due, limit - len(futures))
                for request in self.requests(self.loaded + len(futures), due):
                    futures.append(
                        self.producer.enqueue_nowait(
                            request.queue,
                            request.type,
                            request.payload,
                            tenant_id=request.tenant_id,
                            delay=delay,
                        )
                    )
                time.sleep(max(0.0, started + (elapsed // tick + 1) * tick - time.monotonic()))
        finally:
            gc.enable()
        self.producer.flush(60)
        self.loaded += len(futures)
        return [future.result() for future in futures]

    def sample_record(self) -> tuple[bytes, bytes]:
        """(key, value) of one encoded job: what the raw Kafka loop produces over and over."""
        codec = EnvelopeCodec(self.registry)
        request = next(self.requests(0, 1))
        job = build_job(request, codec=codec, now=time.time(), job_id=uuid.uuid4().hex)
        return request.tenant_id.encode(), codec.encode(job)

    def close(self) -> None:
        self.producer.close()
        self.registry.close()


def registry_mode(url: str, queue: str, schema_dir: Path) -> SchemaRegistry:
    """The codec registry of registry mode, after registering ``queue``'s schemas the
    way a deploy pipeline does (``producer schemas register``): the runtime never does."""
    command = [
        str(Path(sys.executable).parent / "producer"), "schemas", "register",
        "--queue", queue, "--schema-path", str(schema_dir), "--schema-registry", url,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"producer schemas register failed: {done.stderr.strip()[-500:]}")
    settings = RegistrySettings.load(url, None)
    assert settings is not None
    return open_registry(settings, [schema_dir], queues=[queue], attempts=3)
