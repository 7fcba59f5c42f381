"""What every scenario shares: the broker, a scratch directory, pinning and the backlog.

The 200,000-job backlog is written once and drained many times: each drain
(ours with 1, 2, 4 workers, the raw loop, the share group) reads it with its
own consumer group, so every system sees the very same records.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import procs
from benchmarks.config import BenchConfig
from benchmarks.load import Preloader
from devtools.localkafka import LocalKafka, obtain
from devtools.localregistry import LocalRegistry
from jobcore.kafka import KafkaSettings

REPO = Path(__file__).resolve().parent.parent
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"


@dataclass
class BenchContext:
    """Owned resources of one ``python -m benchmarks`` run; :meth:`close` releases them."""

    config: BenchConfig
    out_dir: Path
    pinning: procs.Pinning
    bootstrap: str | None = None
    kafka: LocalKafka | None = None
    # A local Schema Registry, started when a drain runs in registry mode (--codec).
    schema_registry: LocalRegistry | None = None
    scratch: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bench-")))
    enqueue_rates: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Measurements two scenarios share (ours under the 10 ms load), made once.
    cache: dict[str, Any] = field(default_factory=dict)
    _preloaders: dict[str, Preloader] = field(default_factory=dict)

    def start(self) -> None:
        self.pinning.pin_self_to_clients()
        if self.bootstrap is None:
            self.kafka = LocalKafka(
                distribution=obtain(), workdir=self.scratch / "kafka", brokers=1, heap="1g"
            )
            self.bootstrap = self.kafka.start()
            self.pinning.pin_server(self.broker_pid() or 0)
        if self.config.codec != "file":
            self.schema_registry = LocalRegistry(workdir=self.scratch / "registry")
            self.schema_registry.start()
            self.pinning.pin_server(self.schema_registry.pid or 0)

    @property
    def settings(self) -> KafkaSettings:
        assert self.bootstrap is not None, "start() first"
        return KafkaSettings(bootstrap=self.bootstrap, client_id="bench")

    def broker_pid(self) -> int | None:
        """The broker's pid when we started it (its CPU is then measured too)."""
        if self.kafka is None or not self.kafka.nodes or self.kafka.nodes[0].process is None:
            return None
        return self.kafka.nodes[0].process.pid

    def broker_pids(self) -> list[int]:
        pid = self.broker_pid()
        return [pid] if pid else []

    def registry_pids(self) -> list[int]:
        """The Schema Registry's pid when one runs (its CPU is measured beside the broker's)."""
        pid = self.schema_registry.pid if self.schema_registry is not None else None
        return [pid] if pid else []

    @property
    def registry_url(self) -> str:
        assert self.schema_registry is not None, "no Schema Registry: --codec file"
        return self.schema_registry.url

    def fresh_dir(self, name: str) -> Path:
        path = self.scratch / f"{name}-{uuid.uuid4().hex[:6]}"
        path.mkdir(parents=True)
        return path

    def preloader(
        self, name: str = "main", codec: str = "file", ordering_keys: int = 0
    ) -> Preloader:
        """The loader of backlog ``name`` ("main": the no-op drains; "io": the 10 ms load),
        written in ``codec``'s format ("file" or "registry": the Confluent wire format)."""
        key = name if codec == "file" else f"{name}-{codec}"
        if key not in self._preloaders:
            self._preloaders[key] = Preloader(
                self.settings,
                queue=f"bench{name}{uuid.uuid4().hex[:6]}",
                partitions=self.config.partitions,
                tenants=self.config.tenants,
                payload_bytes=self.config.payload_bytes,
                schema_dir=SCHEMA_DIR,
                registry_url=self.registry_url if codec == "registry" else None,
                ordering_keys=ordering_keys,
            )
        return self._preloaders[key]

    def backlog(
        self, jobs: int, name: str = "main", codec: str = "file", ordering_keys: int = 0
    ) -> str:
        """Backlog ``name``, topped up to at least ``jobs`` jobs; returns its queue name.
        ``ordering_keys``: its jobs carry that many ordering keys (fixed by the first call)."""
        loader = self.preloader(name, codec, ordering_keys)
        if loader.loaded < jobs:
            started = time.monotonic()
            added = jobs - loader.loaded
            loader.load(added)
            seconds = time.monotonic() - started
            self.enqueue_rates.append(
                {
                    "backlog": name if codec == "file" else f"{name} ({codec} mode)",
                    "jobs": added,
                    "seconds": round(seconds, 3),
                    "jobs_per_s": round(added / seconds),
                }
            )
        return loader.queue

    def close(self) -> None:
        for loader in self._preloaders.values():
            loader.close()
        if self.kafka is not None:
            self.kafka.stop()
        if self.schema_registry is not None:
            self.schema_registry.stop()
        shutil.rmtree(self.scratch, ignore_errors=True)


@contextmanager
def standalone(
    config: BenchConfig, out_dir: Path, *, pin: bool, bootstrap: str | None
) -> Iterator[BenchContext]:
    """A started context for a benchmark run on its own (``python -m benchmarks.X``):
    the repository on the children's PYTHONPATH (they import the benchmark apps), the
    results directory made, and everything the context started stopped after."""
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = BenchContext(
        config=config, out_dir=out_dir, pinning=procs.Pinning.plan(pin), bootstrap=bootstrap
    )
    try:
        ctx.start()
        yield ctx
    finally:
        ctx.close()
