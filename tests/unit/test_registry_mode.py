"""Registry mode without a registry: the codec, its caches and the settings, with a fake
client; the compatibility rules on schemas built in the test."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from jobcore.delay_tiers import DelayTiers
from jobcore.kafka_retry import Backoff
from jobcore.schema_registry import RegistrySettings, RegistrySetupError, retry_unavailable
from jobcore.topics import QueueTopics
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.kafka.consumer_loop import ConsumerLoop, LoopConfig
from producer.cli import main as producer_main
from producer.schema_check import CheckOutcome, check_files
from schemas.codec import MARKER, DecodeError, EnvelopeCodec, SchemaError, SchemaRegistry
from schemas.compat import CompatibilityLevel, incompatibilities
from schemas.confluent import (
    WIRE_MAGIC,
    ConfluentSchemaRegistry,
    RegistryUnavailable,
    SchemaUnavailable,
    SubjectStrategy,
    schema_text,
    subject_for,
)
from schemas.job import DeadLetter, Job
from tests.unit.engine_ports import with_ports
from workers import App
from workers.decoding import Unrunnable, prepare
from workers.messages import ClaimedJob, LeaseRef


class FakeRegistry:
    """Ids by (subject, schema); ``down`` makes every call fail like an outage."""

    def __init__(self) -> None:
        self.schemas: dict[int, str] = {}
        self.ids: dict[tuple[str, str], int] = {}
        self.down = False
        self.calls = 0

    def register(self, subject: str, schema: str) -> int:
        key = (subject, json.dumps(json.loads(schema), sort_keys=True))
        if key not in self.ids:
            self.ids[key] = len(self.schemas) + 1
            self.schemas[self.ids[key]] = schema
        return self.ids[key]

    def schema_by_id(self, schema_id: int) -> str:
        self._answer()
        return self.schemas[schema_id]

    def id_of(self, subject: str, schema: str) -> int | None:
        self._answer()
        return self.ids.get((subject, json.dumps(json.loads(schema), sort_keys=True)))

    def close(self) -> None:
        pass

    def _answer(self) -> None:
        self.calls += 1
        if self.down:
            raise RegistryUnavailable("connection refused")


def _registered(
    fake: FakeRegistry, cache: Path | None, queue: str = "q"
) -> ConfluentSchemaRegistry:
    registry = ConfluentSchemaRegistry(fake, cache_dir=cache)
    for name, topic in registry.queue_subjects(queue):
        fake.register(registry.subject(name, topic=topic), schema_text(registry.current(name)))
    return registry


def _job(payload: bytes, queue: str = "q") -> Job:
    return Job(
        job_id="j1", queue=queue, tenant_id="t", type="noop", payload=payload, created_at_ms=1
    )


def test_registry_mode_writes_the_confluent_wire_format_and_reads_it_back() -> None:
    fake = FakeRegistry()
    codec = EnvelopeCodec(_registered(fake, None))
    payload = codec.encode_payload("noop", {"n": 3})
    data = codec.encode(_job(payload))
    assert data[:1] == WIRE_MAGIC and payload[:1] == WIRE_MAGIC
    schema_id = int.from_bytes(data[1:5], "big")
    assert json.loads(fake.schemas[schema_id])["name"] == "Job"
    assert codec.decode(data).job_id == "j1"
    assert codec.decode_payload("noop", codec.decode(data).payload) == {"n": 3}


def test_a_registry_mode_reader_reads_single_object_encoding_too() -> None:
    old = EnvelopeCodec(SchemaRegistry())
    data = old.encode(_job(old.encode_payload("noop", {"n": 1})))
    assert data[:2] == MARKER
    new = EnvelopeCodec(_registered(FakeRegistry(), None))
    job = new.decode(data)
    assert new.decode_payload("noop", job.payload) == {"n": 1}


def test_an_unregistered_schema_is_a_clear_error_naming_the_command() -> None:
    registry = ConfluentSchemaRegistry(FakeRegistry())
    with pytest.raises(SchemaError, match=r"jobs\.q-value.*producer schemas register"):
        registry.preflight(registry.queue_subjects("q"))


def test_the_disk_cache_serves_ids_and_schemas_while_the_registry_is_down(
    tmp_path: Path,
) -> None:
    fake = FakeRegistry()
    first = EnvelopeCodec(_registered(fake, tmp_path))
    data = first.encode(_job(first.encode_payload("noop", {"n": 2})))
    first.decode(data)
    fake.down = True
    restarted = EnvelopeCodec(ConfluentSchemaRegistry(fake, cache_dir=tmp_path))
    assert restarted.decode(data).job_id == "j1"
    again = restarted.encode(_job(restarted.encode_payload("noop", {"n": 4})))
    assert restarted.decode_payload("noop", restarted.decode(again).payload) == {"n": 4}


def test_lookups_are_cached_in_memory() -> None:
    fake = FakeRegistry()
    codec = EnvelopeCodec(_registered(fake, None))
    for _ in range(50):
        codec.decode(codec.encode(_job(codec.encode_payload("noop", {"n": 1}))))
    assert fake.calls <= 2


def test_an_unknown_id_with_the_registry_down_is_unavailable_not_undecodable() -> None:
    fake = FakeRegistry()
    fake.down = True
    codec = EnvelopeCodec(ConfluentSchemaRegistry(fake))
    with pytest.raises(SchemaUnavailable, match="schema id 99 is not cached"):
        codec.decode(WIRE_MAGIC + (99).to_bytes(4, "big") + b"\x00")
    with pytest.raises(DecodeError, match="shorter than the 5-byte header"):
        codec.decode(WIRE_MAGIC + b"\x01")


def test_a_dead_letter_is_written_under_the_dlq_subject() -> None:
    fake = FakeRegistry()
    codec = EnvelopeCodec(_registered(fake, None))
    letter = DeadLetter(
        reason="undecodable",
        detail="d",
        source_topic="jobs.q",
        source_partition=0,
        source_offset=1,
        died_at_ms=2,
    )
    data = codec.encode_dead_letter(letter, topic="jobs.q.dlq")
    assert codec.decode_dead_letter(data) == letter
    assert ("jobs.q.dlq-value", json.dumps(json.loads(fake.schemas[2]), sort_keys=True)) in fake.ids


@pytest.mark.parametrize(
    ("strategy", "topic", "expected"),
    [
        (SubjectStrategy.TOPIC_NAME, "jobs.q", "jobs.q-value"),
        (SubjectStrategy.TOPIC_NAME, None, "job.noop"),
        (SubjectStrategy.RECORD_NAME, "jobs.q", "noop"),
        (SubjectStrategy.TOPIC_RECORD_NAME, "jobs.q", "jobs.q-noop"),
    ],
)
def test_subject_strategies(strategy: SubjectStrategy, topic: str | None, expected: str) -> None:
    assert subject_for(strategy, record="noop", topic=topic) == expected


def test_strategies_parse_the_serializer_class_names() -> None:
    full = "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy"
    assert SubjectStrategy.parse(full) is SubjectStrategy.TOPIC_RECORD_NAME
    with pytest.raises(ValueError, match="unknown subject name strategy"):
        SubjectStrategy.parse("Nope")


def test_settings_come_from_a_properties_file(tmp_path: Path) -> None:
    config = tmp_path / "sr.properties"
    config.write_text(
        "schema.registry.url=https://sr.example:8081\n"
        "basic.auth.credentials.source=USER_INFO\nbasic.auth.user.info=u:p\n"
        "value.subject.name.strategy=RecordName\nschema.cache.dir=/var/cache/sr\n"
    )
    settings = RegistrySettings.load(None, config)
    assert settings is not None
    assert settings.url == "https://sr.example:8081"
    assert settings.client == {
        "basic.auth.credentials.source": "USER_INFO",
        "basic.auth.user.info": "u:p",
    }
    assert settings.strategy is SubjectStrategy.RECORD_NAME
    assert settings.cache_dir == Path("/var/cache/sr")
    assert RegistrySettings.load(None, None) is None


def test_an_unknown_settings_key_names_the_file_and_the_key(tmp_path: Path) -> None:
    config = tmp_path / "sr.properties"
    config.write_text("url=http://x\nbasic.auth.usr.info=u:p\n")
    with pytest.raises(
        RegistrySetupError, match=r"sr\.properties: unknown key\(s\) basic\.auth\.usr\.info"
    ):
        RegistrySettings.load(None, config)


def _record(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "order", "fields": list(fields)}


_ID = {"name": "id", "type": "long"}
FULL = CompatibilityLevel.FULL_TRANSITIVE


def test_adding_a_field_with_a_default_is_fully_compatible() -> None:
    new = _record(_ID, {"name": "note", "type": "string", "default": ""})
    assert incompatibilities(new, [_record(_ID)], FULL) == []


def test_adding_a_field_without_a_default_breaks_new_readers_of_old_data() -> None:
    new = _record(_ID, {"name": "note", "type": "string"})
    assert incompatibilities(new, [_record(_ID)], FULL) == [
        "new readers of old data: field 'note' is missing from the data and has no default"
    ]
    assert incompatibilities(new, [_record(_ID)], CompatibilityLevel.FORWARD) == []


def test_changing_a_type_names_the_field_both_ways() -> None:
    new = _record({"name": "id", "type": "string"})
    problems = incompatibilities(new, [_record(_ID)], FULL)
    assert "new readers of old data: field 'id': long cannot be read as string" in problems
    assert "old readers of new data: field 'id': string cannot be read as long" in problems


def test_promotions_are_allowed_one_way() -> None:
    wider = _record({"name": "id", "type": "double"})
    assert incompatibilities(wider, [_record(_ID)], CompatibilityLevel.BACKWARD) == []
    assert incompatibilities(wider, [_record(_ID)], CompatibilityLevel.FORWARD) != []


def test_transitive_levels_compare_with_every_version() -> None:
    v1 = _record(_ID)
    v2 = _record(_ID, {"name": "a", "type": "int", "default": 0})
    v3 = _record({"name": "id", "type": "long"}, {"name": "a", "type": "int"})
    assert incompatibilities(v3, [v1, v2], CompatibilityLevel.BACKWARD) == []
    assert incompatibilities(v3, [v1, v2], CompatibilityLevel.BACKWARD_TRANSITIVE) != []


def test_a_removed_enum_symbol_needs_a_reader_default() -> None:
    old = _record({"name": "s", "type": {"type": "enum", "name": "S", "symbols": ["A", "B"]}})
    new = _record({"name": "s", "type": {"type": "enum", "name": "S", "symbols": ["A"]}})
    assert incompatibilities(new, [old], CompatibilityLevel.BACKWARD) == [
        "new readers of old data: field 's': enum symbols B unknown to the reader"
    ]


def test_nested_and_union_fields_are_named_by_their_path() -> None:
    inner_old = {"type": "record", "name": "In", "fields": [{"name": "x", "type": "int"}]}
    inner_new = {"type": "record", "name": "In", "fields": [{"name": "x", "type": "string"}]}
    old = _record({"name": "in", "type": ["null", inner_old]})
    new = _record({"name": "in", "type": ["null", inner_new]})
    problems = incompatibilities(new, [old], CompatibilityLevel.BACKWARD)
    assert problems and "field 'in'" in problems[0]


def test_file_mode_check_compares_with_the_history_directory(tmp_path: Path) -> None:
    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "order_v1.avsc").write_text(json.dumps(_record(_ID)))
    (tmp_path / "order.avsc").write_text(json.dumps(_record({"name": "id", "type": "string"})))
    results = {r.name: r for r in check_files(SchemaRegistry([tmp_path]))}
    assert results["order"].outcome is CheckOutcome.INCOMPATIBLE
    assert results["order"].level is FULL
    assert any("field 'id'" in p for p in results["order"].problems)
    assert results["noop"].outcome is CheckOutcome.NEW


def test_a_worker_retries_a_job_whose_payload_schema_is_unavailable() -> None:
    """Not dead-lettered: the registry being down says nothing about the job."""
    fake = FakeRegistry()
    writer = EnvelopeCodec(_registered(fake, None))
    envelope = writer.encode(_job(writer.encode_payload("noop", {"n": 1})))
    reader = EnvelopeCodec(ConfluentSchemaRegistry(fake))
    reader.decode(envelope)  # the envelope's schema is seen while the registry is up
    fake.down = True
    app = App("t")
    app.job("noop")(lambda ctx, payload: None)
    lease = ClaimedJob(
        ref=LeaseRef(lease_id="l", token="t"), until_ms=0, attempt=1, envelope=envelope, lease_s=30
    )
    prepared = prepare(app, reader, lease)
    assert isinstance(prepared, Unrunnable)
    assert prepared.failure.error_class == "SchemaUnavailable"
    assert not prepared.failure.permanent


def test_a_bad_registry_config_exits_2_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "sr.properties"
    config.write_text("url=http://127.0.0.1:1\nvalue.subject.name.strategy=ByMood\n")
    result = CliRunner().invoke(
        producer_main, ["schemas", "check", "--schema-registry-config", str(config)]
    )
    assert result.exit_code == 2
    assert result.exception is None or isinstance(result.exception, SystemExit)
    (line,) = result.output.strip().splitlines()
    assert "sr.properties" in line and "ByMood" in line and "known: TopicName" in line


def test_file_mode_check_on_the_cli_passes_for_the_shipped_schemas() -> None:
    result = CliRunner().invoke(producer_main, ["schemas", "check"])
    assert result.exit_code == 0, result.output
    assert "FULL_TRANSITIVE" in result.output


def test_a_registry_down_at_start_up_is_retried_with_backoff() -> None:
    answers = iter([RegistryUnavailable("refused"), RegistryUnavailable("refused"), 7])

    def action() -> int:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    no_wait = Backoff(base_s=0.0, cap_s=0.0)
    assert retry_unavailable(action, what="starting", backoff=no_wait) == 7

    def down() -> int:
        raise RegistryUnavailable("refused")

    with pytest.raises(RegistryUnavailable, match="refused"):
        retry_unavailable(down, what="starting", backoff=no_wait, attempts=3)


def test_a_cache_that_cannot_be_written_costs_only_lookups(tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    fake = FakeRegistry()
    codec = EnvelopeCodec(_registered(fake, blocked / "cache"))
    data = codec.encode(_job(codec.encode_payload("noop", {"n": 1})))
    assert codec.decode(data).job_id == "j1"


class _Message:
    """The parts of a Kafka message the consumer loop reads."""

    def __init__(
        self, offset: int, value: bytes, headers: list[tuple[str, bytes]] | None = None
    ) -> None:
        self._offset, self._value, self._headers = offset, value, headers

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return "jobs.q"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes:
        return b"t"

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers


class _Consumer:
    def __init__(self) -> None:
        self.seeks: list[tuple[str, int, int]] = []
        self.paused: list[tuple[str, int]] = []

    def seek(self, tp: Any) -> None:
        self.seeks.append((tp.topic, tp.partition, tp.offset))

    def pause(self, tps: list[Any]) -> None:
        self.paused += [(tp.topic, tp.partition) for tp in tps]


def test_the_leasekeeper_holds_a_partition_whose_envelope_schema_is_unavailable() -> None:
    """Not dead-lettered: the partition waits and the record is fetched again."""
    fake = FakeRegistry()
    writer = EnvelopeCodec(_registered(fake, None))
    data = writer.encode(_job(writer.encode_payload("noop", {"n": 1})))
    fake.down = True
    consumer = _Consumer()
    gate = TierGate(DelayTiers(), QueueTopics(queue="q"))
    loop = ConsumerLoop(
        consumer=consumer,  # type: ignore[arg-type]
        producer=None,  # type: ignore[arg-type]
        engine=with_ports(SimpleNamespace()),  # no port method: the engine is never called
        codec=EnvelopeCodec(ConfluentSchemaRegistry(fake)),
        outbox=None,  # type: ignore[arg-type]
        topics=QueueTopics(queue="q"),
        gate=gate,
        config=LoopConfig(),
    )
    loop.fetcher.handle(_Message(41, data))  # type: ignore[arg-type]
    loop.fetcher.handle(_Message(42, data))  # type: ignore[arg-type]  # same batch: skipped
    assert consumer.seeks == [("jobs.q", 0, 41)]
    assert consumer.paused == [("jobs.q", 0)]
    assert gate.is_held(TopicPart("jobs.q", 0))
