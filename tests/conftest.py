"""Session-wide real Kafka: ``KAFKA_BOOTSTRAP`` when set, else a broker the suite starts.

Every test gets its own topic names and group ids (``unique``), so tests never
see each other's data. When Kafka cannot start and ``CI`` is set, every test
that needs it fails with the reason; locally such tests are skipped loudly.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from devtools import compiled
from devtools.localkafka import KafkaUnavailable, LocalKafka, obtain
from devtools.localregistry import LocalRegistry, RegistryUnavailable
from jobcore import gc_tuning
from jobcore.kafka import KafkaSettings
from tests.system import System

if TYPE_CHECKING:
    from benchmarks.peers.servers import PostgresServer


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to test old code: a compiled module older than its source would be
    imported instead of the edit (``make compile`` rebuilds it)."""
    if old := compiled.stale():
        raise pytest.UsageError(
            f"compiled modules older than their sources: {', '.join(old)}; run `make compile`"
        )


@pytest.fixture(autouse=True)
def _test_interpreter_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CLI run in the test process (``CliRunner``) leaves the collector alone:
    ``gc.freeze`` would hide the suite's objects from ``gc.get_referrers`` (which
    Hypothesis's PRNG registration relies on). Services started as processes are
    tuned as they are for users; ``tests/unit/test_gc_tuning.py`` covers the settings."""
    monkeypatch.setattr(gc_tuning, "settle_after_startup", _untuned)


def _untuned(environ: object = None) -> gc_tuning.GcSetting:
    return gc_tuning.GcSetting(tuned=False, frozen=0, thresholds=(0, 0, 0))


@pytest.fixture(scope="session")
def local_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka | None]:
    """The suite's own broker, or None when ``KAFKA_BOOTSTRAP`` points elsewhere."""
    if os.environ.get("KAFKA_BOOTSTRAP"):
        yield None
        return
    workdir = Path(tmp_path_factory.mktemp("kafka"))
    cluster = None
    try:
        cluster = LocalKafka(distribution=obtain(), workdir=workdir, brokers=1, heap="1536m")
        cluster.start()
    except KafkaUnavailable as exc:
        if cluster is not None:
            cluster.stop(grace=5)
        if os.environ.get("CI"):
            pytest.fail(f"Kafka could not start in CI: {exc}", pytrace=False)
        pytest.skip(f"Kafka could not start (set KAFKA_BOOTSTRAP to use another): {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


# Leasekeepers started together join a new group's first rebalance together, and
# share the ready partitions; a member joining an assigned group may get none of them.
GROUP_FORMING_MS = 3_000


@pytest.fixture(scope="module")
def kafka_cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """A 3-broker cluster of the module's own, for tests that kill brokers.

    The session broker is a single node and is shared, so it can be neither killed
    nor used to show failover. With three nodes, topics get replication 3 and
    ``min.insync.replicas`` 2 by default: ``acks=all`` writes go on with one broker
    down. Small heaps, and stopped with the module, because the machine is shared.
    """
    workdir = Path(tmp_path_factory.mktemp("kafka3"))
    cluster = LocalKafka(
        distribution=obtain(),
        workdir=workdir,
        brokers=3,
        heap="384m",
        initial_rebalance_delay_ms=GROUP_FORMING_MS,
    )
    try:
        cluster.start()
    except KafkaUnavailable as exc:
        cluster.stop(grace=5)
        if os.environ.get("CI"):
            pytest.fail(f"a 3-broker Kafka could not start in CI: {exc}", pytrace=False)
        pytest.skip(f"a 3-broker Kafka could not start: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(local_kafka: LocalKafka | None) -> str:
    if local_kafka is None:
        return os.environ["KAFKA_BOOTSTRAP"]
    return local_kafka.bootstrap


@pytest.fixture
def kafka(kafka_bootstrap: str) -> KafkaSettings:
    return KafkaSettings(bootstrap=kafka_bootstrap, client_id="tests")


def start_registry(workdir: Path) -> LocalRegistry:
    """A registry of the caller's own (Apicurio, Java 21+), or a clear skip or CI failure."""
    registry = LocalRegistry(workdir=workdir)
    try:
        registry.start()
    except RegistryUnavailable as exc:
        registry.stop(grace=5)
        if os.environ.get("CI"):
            pytest.fail(f"the Schema Registry could not start in CI: {exc}", pytrace=False)
        pytest.skip(f"the Schema Registry could not start: {exc}")
    return registry


@pytest.fixture(scope="session")
def schema_registry_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The suite's Schema Registry (Confluent-compatible API): ``TEST_SCHEMA_REGISTRY_URL``
    when set, else an Apicurio Registry the suite starts, like its Kafka."""
    external = os.environ.get("TEST_SCHEMA_REGISTRY_URL")
    if external:
        yield external
        return
    registry = start_registry(Path(tmp_path_factory.mktemp("registry")))
    try:
        yield registry.url
    finally:
        registry.stop()


@pytest.fixture
def unique() -> str:
    """A suffix for this test's topic names and consumer-group ids."""
    return uuid.uuid4().hex[:10]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Keep each phase's report on the test, so a fixture can tell a failed test."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"report_{report.when}", report)


@pytest.fixture
def system(
    kafka: KafkaSettings, unique: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[System]:
    """A queue with its leasekeeper(s) and worker processes, stopped after the test.
    When the test failed, the tail of every process's log goes to the report: a
    failure seen once in CI explains itself."""
    sut = System(kafka, unique, tmp_path)
    yield sut
    sut.stop()
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        sys.stderr.write(sut.log_tails())


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A private PostgreSQL cluster from Debian's packages, as the benchmark runs it
    (installed with apt-get when missing and running as root). When it cannot start
    and ``CI`` is set, the tests that need it fail; locally they are skipped loudly."""
    from benchmarks.peers.servers import PostgresServer, Unavailable
    from benchmarks.procs import Pinning

    server = PostgresServer(Pinning(servers=None, clients=None), allow_install=True)
    try:
        server.start()
    except Unavailable as exc:
        server.stop()
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL could not start in CI: {exc}", pytrace=False)
        pytest.skip(f"PostgreSQL could not start (install the postgresql package): {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_dsn(postgres: PostgresServer, unique: str) -> str:
    """A database of this test's own (advisory locks and the outbox table are per database)."""
    import psycopg

    name = f"t{unique}"
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}".encode())
    return f"host=127.0.0.1 port={postgres.port} user=postgres dbname={name}"
