"""Single-object Avro encoding: round trips, payload validation, undecodable bytes, evolution."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.codec import (
    DEAD_LETTER_SCHEMA,
    JOB_SCHEMA,
    MARKER,
    DecodeError,
    EnvelopeCodec,
    PayloadError,
    SchemaError,
    SchemaRegistry,
)
from schemas.job import AttemptError, DeadLetter, DeadLetterReason, Job

PACKAGE_SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"

# Fingerprints of schema versions that have been released. Records written with
# them may sit on a topic for weeks, so each must stay decodable: change a
# schema by moving the old file to schemas/history/ and adding the new one here.
RELEASED = {
    JOB_SCHEMA: "23eadc9d3f31c9b6",
    DEAD_LETTER_SCHEMA: "d5d9af80533c8633",
    "send_receipt": "284a84a7f970ea64",
    "resize_image": "1983137e493b5b53",
    "noop": "93401fbd799452d2",
}


@pytest.fixture(scope="module")
def registry() -> SchemaRegistry:
    return SchemaRegistry()


@pytest.fixture(scope="module")
def codec(registry: SchemaRegistry) -> EnvelopeCodec:
    return EnvelopeCodec(registry)


def receipt(codec: EnvelopeCodec, **overrides: Any) -> Job:
    fields: dict[str, Any] = {
        "job_id": "0f1e2d3c",
        "queue": "emails",
        "tenant_id": "acme",
        "type": "send_receipt",
        "payload": codec.encode_payload(
            "send_receipt", {"order_id": 42, "email": "a@example.com", "amount_cents": 1999}
        ),
        "created_at_ms": 1_700_000_000_000,
    }
    return Job(**{**fields, **overrides})


def write_schema(directory: Path, filename: str, schema: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / filename
    path.write_text(json.dumps(schema), encoding="utf-8")
    return path


def record_schema(name: str, fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": fields}


# -- round trips ---------------------------------------------------------------


def test_job_round_trips_with_every_field_set(codec: EnvelopeCodec) -> None:
    error = AttemptError(
        attempt=1, at_ms=5, worker="w-1", error_class="Timeout", message="slow", traceback="tb"
    )
    job = receipt(
        codec,
        priority=-3,
        run_at_ms=1_700_000_000_500,
        attempt=2,
        max_attempts=3,
        timeout_s=2.5,
        dedupe_key="order-42",
        trace={"traceparent": "00-abc-01"},
        errors=(error, error),
        replay_count=1,
    )
    assert codec.decode(codec.encode(job)) == job


def test_job_defaults_round_trip(codec: EnvelopeCodec) -> None:
    job = receipt(codec)
    decoded = codec.decode(codec.encode(job))
    assert decoded == job
    assert (decoded.attempt, decoded.max_attempts, decoded.timeout_s) == (0, 8, 30.0)
    assert decoded.dedupe_key is None and decoded.trace == {} and decoded.errors == ()


def test_encoded_bytes_are_single_object_encoding(
    codec: EnvelopeCodec, registry: SchemaRegistry
) -> None:
    data = codec.encode(receipt(codec))
    assert data[:2] == MARKER == b"\xc3\x01"
    assert data[2:10] == registry.current(JOB_SCHEMA).fingerprint


@pytest.mark.parametrize(
    "letter",
    [
        DeadLetter(
            envelope=b"\xc3\x01envelope",
            reason=DeadLetterReason.ATTEMPTS_EXHAUSTED,
            detail="8 attempts",
            source_topic="jobs.emails",
            source_partition=3,
            source_offset=2**40,
            died_at_ms=1_700_000_000_000,
        ),
        DeadLetter(
            raw_value=b"\x00garbage",
            raw_key=b"acme",
            reason="undecodable",
            detail="marker 0067",
            source_topic="jobs.emails",
            source_partition=0,
            source_offset=0,
            died_at_ms=1,
        ),
    ],
)
def test_dead_letter_round_trips(codec: EnvelopeCodec, letter: DeadLetter) -> None:
    assert codec.decode_dead_letter(codec.encode_dead_letter(letter)) == letter


def test_payload_round_trip_fills_defaults(codec: EnvelopeCodec) -> None:
    data = codec.encode_payload("send_receipt", {"order_id": 1, "email": "e", "amount_cents": 5})
    assert codec.decode_payload("send_receipt", data) == {
        "order_id": 1,
        "email": "e",
        "amount_cents": 5,
        "currency": "EUR",
    }
    assert codec.decode_payload("noop", codec.encode_payload("noop", {})) == {"n": 0}


def test_job_does_not_share_the_callers_trace_dict(codec: EnvelopeCodec) -> None:
    trace = {"a": "1"}
    job = receipt(codec, trace=trace)
    trace["a"] = "2"
    assert job.trace == {"a": "1"}


# -- payload validation ------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (
            {"order_id": 1, "email": "e", "amount_cents": "abc"},
            "send_receipt payload: field 'amount_cents' expected long, got str 'abc'",
        ),
        (
            {"email": "e", "amount_cents": 1},
            "send_receipt payload: field 'order_id' is required (long)",
        ),
        (
            {"order_id": None, "email": "e", "amount_cents": 1},
            "send_receipt payload: field 'order_id' expected long, got null",
        ),
        (
            {"order_id": True, "email": "e", "amount_cents": 1},
            "send_receipt payload: field 'order_id' expected long, got bool True",
        ),
        (
            {"order_id": 2**63, "email": "e", "amount_cents": 1},
            "send_receipt payload: field 'order_id' value 9223372036854775808 is out of range",
        ),
        (
            {"order_id": 1, "email": "e", "amount_cents": 1, "amount": 2},
            "send_receipt payload: unknown field 'amount'",
        ),
    ],
)
def test_payload_errors_name_the_type_and_the_field(
    codec: EnvelopeCodec, payload: dict[str, object], message: str
) -> None:
    with pytest.raises(PayloadError) as caught:
        codec.encode_payload("send_receipt", payload)
    assert str(caught.value).startswith(message)
    assert isinstance(caught.value, ValueError)


def test_int_fields_reject_values_beyond_32_bits(codec: EnvelopeCodec) -> None:
    with pytest.raises(PayloadError, match=r"resize_image payload: field 'width'.*range for int"):
        codec.encode_payload("resize_image", {"image_url": "u", "width": 2**31, "height": 1})


def test_a_payload_that_is_not_an_object_is_refused(codec: EnvelopeCodec) -> None:
    with pytest.raises(PayloadError, match="noop payload: expected an object"):
        codec.encode_payload("noop", [1, 2])  # type: ignore[arg-type]


def test_unknown_job_type_is_a_payload_error(codec: EnvelopeCodec) -> None:
    with pytest.raises(PayloadError, match=r"no schema for job type 'send_invoice' \(known: noop"):
        codec.encode_payload("send_invoice", {})


def test_envelope_names_are_not_job_types(codec: EnvelopeCodec) -> None:
    with pytest.raises(PayloadError, match="no schema for job type"):
        codec.encode_payload(JOB_SCHEMA, {})


def test_nested_payload_errors_give_the_path(tmp_path: Path) -> None:
    address = record_schema("address", [{"name": "zip", "type": "int"}])
    write_schema(
        tmp_path,
        "ship.avsc",
        record_schema(
            "ship",
            [
                {"name": "to", "type": ["null", address], "default": None},
                {"name": "stops", "type": {"type": "array", "items": "address"}, "default": []},
                {"name": "tags", "type": {"type": "map", "values": "long"}, "default": {}},
                {
                    "name": "speed",
                    "type": {"type": "enum", "name": "speed", "symbols": ["SLOW", "FAST"]},
                    "default": "SLOW",
                },
            ],
        ),
    )
    codec = EnvelopeCodec(SchemaRegistry([tmp_path]))
    cases: dict[str, dict[str, object]] = {
        "field 'to.zip' expected int, got str 'x'": {"to": {"zip": "x"}},
        "field 'stops[1].zip' is required (int)": {"stops": [{"zip": 1}, {}]},
        "field \"tags['a']\" expected long, got float 1.5": {"tags": {"a": 1.5}},
        "field 'speed' expected speed, got str 'WARP'": {"speed": "WARP"},
        "field 'to' expected null or address, got int 7": {"to": 7},
    }
    for message, payload in cases.items():
        with pytest.raises(PayloadError) as caught:
            codec.encode_payload("ship", payload)
        assert str(caught.value) == f"ship payload: {message}"
    ok = {"to": {"zip": 1}, "stops": [{"zip": 2}], "tags": {"a": 3}, "speed": "FAST"}
    assert codec.decode_payload("ship", codec.encode_payload("ship", ok)) == ok


# -- undecodable bytes -----------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "shorter than the 10-byte header"),
        (b"\xc3\x01\x00", "shorter than the 10-byte header"),
        (b'{"job_id": "not avro at all"}', "marker 7b22 != c301"),
        (b"\xc3\x02" + bytes(8) + b"\x00", "marker c302"),
        (MARKER + bytes(8) + b"\x02a", "unknown schema fingerprint 0000000000000000"),
    ],
)
def test_bytes_that_are_not_an_envelope_raise_decode_error(
    codec: EnvelopeCodec, data: bytes, reason: str
) -> None:
    with pytest.raises(DecodeError, match=reason):
        codec.decode(data)


def test_every_truncation_raises_decode_error(codec: EnvelopeCodec) -> None:
    data = codec.encode(receipt(codec, dedupe_key="k", trace={"a": "b"}))
    for size in range(len(data)):
        with pytest.raises(DecodeError):
            codec.decode(data[:size])


def test_trailing_bytes_raise_decode_error(codec: EnvelopeCodec) -> None:
    with pytest.raises(DecodeError, match="1 bytes left after"):
        codec.decode(codec.encode(receipt(codec)) + b"\x00")


def test_another_record_type_is_not_an_envelope(codec: EnvelopeCodec) -> None:
    payload = codec.encode_payload("noop", {"n": 1})
    with pytest.raises(DecodeError, match=r"hold a noop record, expected leasequeue\.Job"):
        codec.decode(payload)
    with pytest.raises(DecodeError, match="hold a noop record"):
        codec.decode_payload("send_receipt", payload)


def test_a_missing_value_is_a_decode_error(codec: EnvelopeCodec) -> None:
    with pytest.raises(DecodeError, match="expected bytes, got NoneType"):
        codec.decode(None)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=200))
def test_garbage_after_a_valid_header_never_escapes_as_another_error(body: bytes) -> None:
    codec = EnvelopeCodec(SchemaRegistry())
    header = MARKER + codec.registry.current(JOB_SCHEMA).fingerprint
    with contextlib.suppress(DecodeError):
        codec.decode(header + body)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=64))
def test_arbitrary_bytes_raise_only_decode_error(data: bytes) -> None:
    codec = EnvelopeCodec(SchemaRegistry())
    with pytest.raises(DecodeError):
        codec.decode_dead_letter(data)


# -- the registry ------------------------------------------------------------------


def test_registry_lists_the_builtin_job_types(registry: SchemaRegistry) -> None:
    assert registry.payload_types() == ["noop", "password_reset", "resize_image", "send_receipt"]


def test_released_schema_versions_stay_decodable(registry: SchemaRegistry) -> None:
    for name, fingerprint in RELEASED.items():
        known = {v.fingerprint.hex() for v in registry.versions(name)}
        assert fingerprint in known, (
            f"{name} {fingerprint} was released but is no longer known: keep the old .avsc "
            "in schemas/history/ when changing a schema"
        )


def test_extra_directories_add_job_types(tmp_path: Path) -> None:
    write_schema(
        tmp_path, "greet.avsc", record_schema("greet", [{"name": "who", "type": "string"}])
    )
    registry = SchemaRegistry([tmp_path])
    assert "greet" in registry.payload_types()
    codec = EnvelopeCodec(registry)
    assert codec.decode_payload("greet", codec.encode_payload("greet", {"who": "x"})) == {
        "who": "x"
    }


def test_two_current_versions_of_a_name_are_refused(tmp_path: Path) -> None:
    write_schema(tmp_path, "noop.avsc", record_schema("noop", [{"name": "m", "type": "int"}]))
    with pytest.raises(SchemaError, match=r"noop is defined by both .* history/"):
        SchemaRegistry([tmp_path])


def test_the_same_schema_twice_is_harmless() -> None:
    registry = SchemaRegistry([PACKAGE_SCHEMAS / "jobs"])
    assert registry.payload_types() == ["noop", "password_reset", "resize_image", "send_receipt"]


@pytest.mark.parametrize(
    ("filename", "content", "message"),
    [
        ("greet.avsc", "{not json", "greet.avsc: JSONDecodeError"),
        ("greet.avsc", '"string"', "must be a record"),
        ("hello.avsc", json.dumps(record_schema("greet", [])), "must be named greet.avsc"),
        (
            "greet.avsc",
            json.dumps(record_schema("greet", [{"name": "a", "type": "Nope"}])),
            "greet.avsc: UnknownType",
        ),
    ],
)
def test_broken_schema_files_raise_schema_error(
    tmp_path: Path, filename: str, content: str, message: str
) -> None:
    (tmp_path / filename).write_text(content, encoding="utf-8")
    with pytest.raises(SchemaError, match=message):
        SchemaRegistry([tmp_path])


def test_a_missing_schema_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="does not exist"):
        SchemaRegistry([tmp_path / "nope"])


# -- schema evolution ---------------------------------------------------------------


def _envelope_without_replay_count() -> dict[str, Any]:
    schema = json.loads((PACKAGE_SCHEMAS / "envelope.avsc").read_text(encoding="utf-8"))
    schema["fields"] = [f for f in schema["fields"] if f["name"] != "replay_count"]
    return dict(schema)


def _schema_tree(root: Path, envelope: dict[str, Any], history: dict[str, Any]) -> Path:
    """A copy of the package's schemas with ``envelope`` current and ``history`` kept."""
    shutil.copytree(PACKAGE_SCHEMAS, root, ignore=shutil.ignore_patterns("*.py*", "__pycache__"))
    write_schema(root, "envelope.avsc", envelope)
    write_schema(root / "history", "envelope.other.avsc", history)
    return root


@pytest.fixture
def old_and_new(tmp_path: Path) -> tuple[SchemaRegistry, SchemaRegistry]:
    """The registries of a reader before and after ``replay_count`` was added.

    Each knows the other's envelope in ``history/``: the old one because the new
    .avsc was deployed to readers before producers started writing it.
    """
    old = _envelope_without_replay_count()
    new = json.loads((PACKAGE_SCHEMAS / "envelope.avsc").read_text(encoding="utf-8"))
    before = SchemaRegistry(base_dir=_schema_tree(tmp_path / "old", old, new))
    after = SchemaRegistry(base_dir=_schema_tree(tmp_path / "new", new, old))
    return before, after


def test_a_new_reader_reads_an_old_envelope(
    old_and_new: tuple[SchemaRegistry, SchemaRegistry], codec: EnvelopeCodec
) -> None:
    before, after = old_and_new
    record = receipt(codec, attempt=1).to_avro()
    del record["replay_count"]
    data = before.encode(JOB_SCHEMA, record)

    job = EnvelopeCodec(after).decode(data)

    assert job == receipt(codec, attempt=1)
    assert job.replay_count == 0  # the default of the field the old writer lacked


def test_an_old_reader_reads_a_new_envelope(
    old_and_new: tuple[SchemaRegistry, SchemaRegistry], codec: EnvelopeCodec
) -> None:
    before, after = old_and_new
    data = after.encode(JOB_SCHEMA, receipt(codec, replay_count=3).to_avro())

    record = before.decode(data, expect=JOB_SCHEMA)

    expected = receipt(codec).to_avro()
    del expected["replay_count"]
    assert record == expected


def test_a_reader_without_the_writers_schema_says_what_to_deploy(
    old_and_new: tuple[SchemaRegistry, SchemaRegistry], codec: EnvelopeCodec
) -> None:
    before, _ = old_and_new
    record = receipt(codec).to_avro()
    del record["replay_count"]
    data = before.encode(JOB_SCHEMA, record)
    with pytest.raises(DecodeError, match=r"unknown schema fingerprint .* deploy the writer's"):
        codec.decode(data)


def test_payload_types_evolve_through_extra_directories(tmp_path: Path) -> None:
    v1 = record_schema("greet", [{"name": "who", "type": "string"}])
    v2 = record_schema(
        "greet",
        [{"name": "who", "type": "string"}, {"name": "word", "type": "string", "default": "hi"}],
    )
    write_schema(tmp_path / "old", "greet.avsc", v1)
    write_schema(tmp_path / "old" / "history", "greet.v2.avsc", v2)
    write_schema(tmp_path / "new", "greet.avsc", v2)
    write_schema(tmp_path / "new" / "history", "greet.v1.avsc", v1)
    old = EnvelopeCodec(SchemaRegistry([tmp_path / "old"]))
    new = EnvelopeCodec(SchemaRegistry([tmp_path / "new"]))

    from_old = old.encode_payload("greet", {"who": "ann"})
    from_new = new.encode_payload("greet", {"who": "bo", "word": "hey"})

    assert new.decode_payload("greet", from_old) == {"who": "ann", "word": "hi"}
    assert old.decode_payload("greet", from_new) == {"who": "bo"}
    assert len(new.registry.versions("greet")) == 2
