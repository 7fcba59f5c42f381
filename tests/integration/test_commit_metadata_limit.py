"""A broker whose ``offset.metadata.max.bytes`` is below the 4 KB the leasekeeper plans for."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.localkafka import LocalKafka, obtain
from jobcore.kafka import KafkaSettings
from tests.system import System, wait_until


@pytest.fixture(scope="module")
def small_metadata_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSettings]:
    cluster = LocalKafka(
        distribution=obtain(),
        workdir=Path(tmp_path_factory.mktemp("kafka-small-metadata")),
        brokers=1,
        heap="384m",
        overrides={"offset.metadata.max.bytes": "16"},
    )
    cluster.start()
    try:
        yield KafkaSettings(bootstrap=cluster.bootstrap, client_id="tests")
    finally:
        cluster.stop()


@pytest.mark.slow
def test_commits_move_on_when_the_broker_refuses_the_metadata(
    small_metadata_kafka: KafkaSettings, unique: str, tmp_path: Path
) -> None:
    system = System(small_metadata_kafka, unique, tmp_path)
    try:
        # One tenant, one partition: a slow head, quick jobs, a second slow job, more
        # quick jobs. Once the head is done, the commit must move up to the second slow
        # job, whose acked followers need more metadata than the broker takes.
        first = system.enqueue_tasks(1, sleep_ms=1500)
        quick = system.enqueue_tasks(30, sleep_ms=0)
        slow = system.enqueue_tasks(1, sleep_ms=20_000, timeout_s=120)
        system.enqueue_tasks(30, sleep_ms=0)
        system.start(workers=1, concurrency=64)
        jobs = system.job_at_offsets()
        (partition, slow_offset) = next(k for k, v in jobs.items() if v == slow[0])
        wait_until(
            lambda: system.committed()[partition] == slow_offset,
            60,
            f"the commit to reach the second slow job at offset {slow_offset}",
            describe=lambda: (system.committed(), system.leasekeeper.snapshot()),
        )
        assert slow[0] not in system.runs()  # still running: the commit did not wait for it
        assert {first[0], *quick} <= set(system.runs())
        assert "refused" in (tmp_path / "lk.log").read_text()
    finally:
        for worker in system.workers:
            worker.kill()  # the slow job would hold a graceful stop for a minute
        system.stop()
