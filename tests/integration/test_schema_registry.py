"""Registry mode end to end: real Kafka, a real Schema Registry (Apicurio), the real
processes. Every queue and every test-only job type has a unique name, so tests that
share the session's registry never share a subject they change."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from devtools.localregistry import LocalRegistry
from jobcore.kafka import KafkaSettings
from jobcore.schema_registry import (
    ConfluentRegistryClient,
    RegistrySettings,
    RegistrySetupError,
    open_registry,
)
from leasekeeper.ops.cli import main as leasekeeper_main
from producer import JobProducer, JobRequest
from producer.cli import main as producer_main
from schemas.codec import MARKER, SchemaRegistry
from schemas.confluent import WIRE_MAGIC
from tests.apps.recording import SCHEMAS
from tests.conftest import start_registry
from tests.system import System, wait_until

pytestmark = pytest.mark.kafka


def _config(tmp: Path, url: str, name: str = "registry.properties") -> Path:
    """A registry config file with a cache of the test's own (as a deploy would give)."""
    path = tmp / name
    path.write_text(f"schema.registry.url={url}\nschema.cache.dir={tmp / 'schema-cache'}\n")
    return path


def _cli(main: object, *args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)  # type: ignore[arg-type]


def _register(config: Path, queue: str, *schema_dirs: Path) -> None:
    dirs = [a for d in schema_dirs for a in ("--schema-path", str(d))]
    result = _cli(
        producer_main, "schemas", "register", "--queue", queue, *dirs,
        "--schema-registry-config", str(config),
    )  # fmt: skip
    assert result.exit_code == 0, result.output


@contextmanager
def _producer(kafka: KafkaSettings, config: Path, queue: str) -> Iterator[JobProducer]:
    """A registry-mode producer, as an application would build one."""
    settings = RegistrySettings.load(None, config)
    assert settings is not None
    registry = open_registry(settings, [SCHEMAS], queues=[queue], attempts=1)
    try:
        with JobProducer(kafka, registry=registry) as producer:
            yield producer
    finally:
        registry.close()


def _registry_system(system: System, config: Path) -> None:
    """The system's leasekeeper and workers in registry mode."""
    extra = ["--schema-registry-config", str(config)]
    system.configure(lease_s=system.lease_s, extra=extra)
    system.start(workers=0)
    system.add_worker(system.leasekeeper, extra=extra)


def _noops(queue: str, count: int, start: int = 0) -> list[JobRequest]:
    return [
        JobRequest(queue=queue, type="noop", payload={"n": i}, tenant_id=f"t{i % 3}")
        for i in range(start, start + count)
    ]


@pytest.fixture
def config(tmp_path: Path, schema_registry_url: str, system: System) -> Path:
    path = _config(tmp_path, schema_registry_url)
    _register(path, system.queue, SCHEMAS)
    return path


def test_a_job_enqueued_in_registry_mode_is_run_by_a_worker(
    system: System, config: Path, kafka: KafkaSettings
) -> None:
    _registry_system(system, config)
    with _producer(kafka, config, system.queue) as producer:
        ids = producer.enqueue_batch(_noops(system.queue, 20))
    wait_until(lambda: set(ids) <= system.acks(), 60, "every job to be acked")
    values = [m.value() for m in system.read_topic(system.topics.ready)]
    assert values and all(v[:1] == WIRE_MAGIC for v in values)


def test_a_plain_avro_deserializer_reads_what_registry_mode_wrote(
    system: System, config: Path, kafka: KafkaSettings, schema_registry_url: str
) -> None:
    """What kcat -s avro, Connect or ksqlDB do: schema by id from the registry.

    The deserializer is given the TopicName strategy those tools use: from 2.16 on
    the client's default first asks the registry for "associations", which
    Apicurio 3.3 answers 404, or about one time in 300 not at all (measured), and
    the client's default timeout is none. A timeout bounds any other stall."""
    with _producer(kafka, config, system.queue) as producer:
        (job_id,) = producer.enqueue_batch(_noops(system.queue, 1, start=7))
    (message,) = system.read_topic(system.topics.ready)
    with SchemaRegistryClient({"url": schema_registry_url, "timeout": 10}) as client:
        deserialize = AvroDeserializer(
            client, conf={"subject.name.strategy": topic_subject_name_strategy}
        )
        value = SerializationContext(message.topic(), MessageField.VALUE)
        envelope = deserialize(message.value(), value)
        payload = deserialize(envelope["payload"], SerializationContext("job", MessageField.VALUE))
    assert envelope["job_id"] == job_id and envelope["type"] == "noop"
    assert payload == {"n": 7}


def test_a_dead_letter_in_registry_mode_is_read_back_by_dlq_show(
    system: System, config: Path, kafka: KafkaSettings, schema_registry_url: str
) -> None:
    _registry_system(system, config)
    request = system.task_request(1, permanent=True, fail_attempts=9)
    with _producer(kafka, config, system.queue) as producer:
        (job_id,) = producer.enqueue_batch([request])
    wait_until(lambda: bool(system.read_topic(system.topics.dlq)), 60, "a dead letter")
    (letter,) = system.read_topic(system.topics.dlq)
    assert letter.value()[:1] == WIRE_MAGIC
    result = _cli(
        leasekeeper_main, "dlq", "show", job_id, "--queue", system.queue,
        "--bootstrap", kafka.bootstrap, "--schema-path", str(SCHEMAS),
        "--schema-registry-config", str(config), "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    record = json.loads(result.output.splitlines()[0])
    assert record["reason"] == "permanent error"
    assert record["job"]["payload"]["permanent"] is True


def test_a_mixed_topic_is_drained_without_loss(
    system: System, config: Path, kafka: KafkaSettings
) -> None:
    """A queue moving to the registry: file-mode records already on the topic, and new
    registry-mode ones behind them, all run by registry-mode processes."""
    with JobProducer(kafka, registry=SchemaRegistry(extra_dirs=[SCHEMAS])) as old:
        ids = old.enqueue_batch(_noops(system.queue, 15))
    with _producer(kafka, config, system.queue) as new:
        ids += new.enqueue_batch(_noops(system.queue, 15, start=15))
    firsts = {m.value()[:1] for m in system.read_topic(system.topics.ready)}
    assert firsts == {MARKER[:1], WIRE_MAGIC}
    _registry_system(system, config)
    wait_until(lambda: set(ids) <= system.acks(), 60, "every job of both formats to be acked")
    assert not system.read_topic(system.topics.dlq)


@pytest.fixture
def changing_type(tmp_path: Path, unique: str) -> Iterator[tuple[str, Path, Path]]:
    """A job type of this test alone, in a first version and an incompatible second."""
    name = f"order_{unique}"
    old, new = tmp_path / "v1", tmp_path / "v2"
    fields_v1 = [{"name": "id", "type": "long"}, {"name": "note", "type": "string"}]
    fields_v2 = [{"name": "id", "type": "string"}, {"name": "note", "type": "string"}]
    for directory, fields in ((old, fields_v1), (new, fields_v2)):
        directory.mkdir()
        schema = {"type": "record", "name": name, "fields": fields}
        (directory / f"{name}.avsc").write_text(json.dumps(schema))
    yield name, old, new


def test_an_incompatible_payload_change_is_refused_by_check_and_registration(
    tmp_path: Path, schema_registry_url: str, changing_type: tuple[str, Path, Path]
) -> None:
    name, old, new = changing_type
    config = _config(tmp_path, schema_registry_url)
    args = ["--schema-registry-config", str(config)]
    first = _cli(producer_main, "schemas", "register", "--schema-path", str(old), *args)
    assert first.exit_code == 0, first.output
    again = _cli(producer_main, "schemas", "register", "--schema-path", str(old), *args)
    assert again.exit_code == 0 and "registered" not in again.output  # idempotent

    check = _cli(producer_main, "schemas", "check", "--schema-path", str(new), *args)
    assert check.exit_code == 1
    assert f"job.{name}" in check.output and "field 'id'" in check.output
    register = _cli(producer_main, "schemas", "register", "--schema-path", str(new), *args)
    assert register.exit_code == 1 and "field 'id'" in register.output

    client = ConfluentRegistryClient(RegistrySettings(url=schema_registry_url))
    try:
        with pytest.raises(RegistrySetupError):  # the registry itself refuses it too
            client.register(f"job.{name}", (new / f"{name}.avsc").read_text())
    finally:
        client.close()


@pytest.fixture
def own_registry(tmp_path: Path) -> Iterator[LocalRegistry]:
    """A registry this test may stop (the session's is shared)."""
    registry = start_registry(tmp_path / "own-registry")
    try:
        yield registry
    finally:
        registry.stop()


@pytest.mark.slow
def test_the_queue_keeps_running_on_cached_schemas_when_the_registry_stops(
    system: System, kafka: KafkaSettings, own_registry: LocalRegistry, tmp_path: Path
) -> None:
    config = _config(tmp_path, own_registry.url)
    _register(config, system.queue, SCHEMAS)
    _registry_system(system, config)
    with _producer(kafka, config, system.queue) as producer:
        ids = producer.enqueue_batch(_noops(system.queue, 10))
    wait_until(lambda: set(ids) <= system.acks(), 60, "the first jobs to be acked")

    own_registry.stop()
    assert not own_registry.answers()
    # New processes, started while the registry is down: they run on the disk cache.
    with _producer(kafka, config, system.queue) as producer:
        later = producer.enqueue_batch(_noops(system.queue, 10, start=10))
    for worker in system.workers:
        worker.stop()
    system.leasekeeper.stop()
    system.restart_leasekeeper()
    system.add_worker(system.leasekeeper, extra=["--schema-registry-config", str(config)])
    wait_until(lambda: set(later) <= system.acks(), 60, "jobs enqueued with the registry down")
    assert not system.read_topic(system.topics.dlq)


def test_producer_enqueue_on_the_command_line_writes_the_wire_format(
    system: System, config: Path, kafka: KafkaSettings
) -> None:
    result = _cli(
        producer_main, "enqueue", system.queue, "noop", "--tenant", "t", "--payload", '{"n": 5}',
        "--bootstrap", kafka.bootstrap, "--schema-registry-config", str(config),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (message,) = system.read_topic(system.topics.ready)
    assert message.value()[:1] == WIRE_MAGIC


def test_an_unregistered_queue_is_refused_at_start_up_with_the_fix(
    system: System, tmp_path: Path, schema_registry_url: str, kafka: KafkaSettings
) -> None:
    """The runtime never registers: the producer and the leasekeeper exit 2, naming the
    subject and the command that registers it, before writing anything."""
    config = _config(tmp_path, schema_registry_url)
    result = _cli(
        producer_main, "enqueue", system.queue, "noop", "--tenant", "t", "--payload", "{}",
        "--bootstrap", kafka.bootstrap, "--schema-registry-config", str(config),
    )  # fmt: skip
    assert result.exit_code == 2
    assert f"jobs.{system.queue}-value" in result.output
    assert "producer schemas register" in result.output
    system.configure(lease_s=30, extra=["--schema-registry-config", str(config)])
    system.leasekeeper.start()
    process = system.leasekeeper.process
    assert process is not None and process.wait(60) == 2
    log = system.leasekeeper.log.read_text()
    assert "producer schemas register" in log and "Traceback" not in log
    assert not system.read_topic(system.topics.ready)
