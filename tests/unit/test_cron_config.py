"""Cron entries from TOML and from the API: valid ones load, invalid ones name the
entry and the field."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from jobcore.kafka import KafkaSettings
from producer.scheduler import (
    CronConfigError,
    CronEntry,
    MisfirePolicy,
    Scheduler,
    SchedulerOptions,
    load_config,
    parse_config,
)
from producer.scheduler.listing import list_rows
from producer.scheduler.state import LastFire, decode_last_fire, encode_last_fire

EXAMPLE = """
[scheduler]
name = "billing"
session_timeout_ms = 8000
misfire_grace_s = 30

[[cron]]
name = "nightly-report"
schedule = "30 2 * * *"
timezone = "Europe/Berlin"
queue = "reports"
type = "noop"
tenant = "acme"
payload = { n = 7 }
misfire = "skip"
max_attempts = 3
timeout_s = 600

[[cron]]
name = "heartbeat"
schedule = "*/2 * * * * *"
queue = "ops"
type = "noop"
tenant = "ops"
"""

GOOD = {"name": "x", "schedule": "* * * * *", "queue": "q", "type": "noop", "tenant": "t"}


def parse(text: str) -> Any:
    return parse_config(tomllib.loads(text))


def one(**fields: Any) -> dict[str, Any]:
    return {"cron": [{**GOOD, **fields}]}


def test_a_file_loads_with_its_options_and_entries(tmp_path: Path) -> None:
    path = tmp_path / "cron.toml"
    path.write_text(EXAMPLE)
    config = load_config(path, prefix="acme-jobs")
    assert config.options == SchedulerOptions(
        name="billing", prefix="acme-jobs", session_timeout_ms=8000, misfire_grace_s=30.0
    )
    report, heartbeat = config.entries
    assert report == CronEntry(
        name="nightly-report",
        schedule="30 2 * * *",
        timezone="Europe/Berlin",
        queue="reports",
        type="noop",
        tenant="acme",
        payload={"n": 7},
        misfire=MisfirePolicy.SKIP,
        max_attempts=3,
        timeout_s=600.0,
    )
    assert (heartbeat.timezone, heartbeat.misfire, heartbeat.payload) == (
        "UTC",
        MisfirePolicy.CATCH_UP_ONCE,
        {},
    )
    assert config.options.state_topic == "acme-jobs._scheduler.billing.state"
    assert config.options.leader_topic == "acme-jobs._scheduler.billing.leader"
    assert config.options.group == "scheduler.acme-jobs.billing"


def test_an_empty_file_has_no_entries_and_default_options() -> None:
    config = parse("")
    assert (config.entries, config.options) == ((), SchedulerOptions())


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"schedule": "*/5 * * *"}, "schedule", "has 4 fields"),
        ({"schedule": "99 * * * *"}, "schedule", "not a valid cron expression"),
        ({"schedule": "0 0 31 2 *"}, "schedule", "never fires"),
        ({"timezone": "Europe/Berln"}, "timezone", "unknown time zone 'Europe/Berln'"),
        ({"timezone": "Europe"}, "timezone", "unknown time zone"),
        ({"misfire": "twice"}, "misfire", "'twice' is not one of catch_up_once, skip"),
        ({"queue": "a b"}, "queue", "invalid queue name"),
        ({"tenant": ""}, "tenant", "non-empty"),
        ({"max_attempts": 0}, "max_attempts", "must be >= 1"),
        ({"max_attempts": "3"}, "max_attempts", "must be an integer, got str"),
        ({"timeout_s": -1}, "timeout_s", "positive"),
        ({"payload": "n=1"}, "payload", "must be a table"),
        ({"timzone": "UTC"}, "timzone", "unknown key"),
        ({"name": "a@b"}, "name", "without spaces or '@'"),
    ],
)
def test_an_invalid_entry_names_itself_and_the_field(
    fields: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(CronConfigError, match=message) as caught:
        parse_config(one(**fields))
    assert caught.value.field == field
    assert str(caught.value).startswith(f"cron entry '{fields.get('name', 'x')}': field '{field}'")


def test_a_missing_field_is_named_and_an_unnamed_entry_is_numbered() -> None:
    without_queue = {k: v for k, v in GOOD.items() if k != "queue"}
    with pytest.raises(CronConfigError, match="cron entry 'x': field 'queue': is required"):
        parse_config({"cron": [without_queue]})
    unnamed = {k: v for k, v in GOOD.items() if k != "name"}
    with pytest.raises(CronConfigError, match="cron entry #2: field 'name': is required"):
        parse_config({"cron": [GOOD, unnamed]})


def test_two_entries_may_not_share_a_name() -> None:
    with pytest.raises(CronConfigError, match="'x': field 'name': another entry has this name"):
        parse_config({"cron": [GOOD, GOOD]})


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"crons": []}, "unknown top-level keys"),
        ({"scheduler": {"nmae": "x"}}, r"\[scheduler\]: unknown key 'nmae'"),
        ({"scheduler": {"session_timeout_ms": "6s"}}, "must be an integer"),
        ({"scheduler": {"name": "a b"}}, "invalid scheduler name"),
        ({"scheduler": {"misfire_grace_s": 0.5}}, "misfire_grace_s must be >= 1 second"),
        ({"cron": {"name": "x"}}, r"\[\[cron\]\] tables"),
    ],
)
def test_file_level_mistakes_are_refused(document: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_config(document)


def test_a_file_that_is_not_toml_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cron.toml"
    path.write_text("[[cron]\nname = 1")
    with pytest.raises(ValueError, match="is not valid TOML"):
        load_config(path)


def test_entries_from_the_api_are_checked_the_same_way() -> None:
    with pytest.raises(CronConfigError, match="cron entry 'api': field 'timezone'"):
        CronEntry(
            name="api",
            schedule="* * * * *",
            queue="q",
            type="noop",
            tenant="t",
            timezone="Mars/Base",
        )
    entry = CronEntry(
        name="api", schedule="* * * * *", queue="q", type="noop", tenant="t", payload={"n": 1}
    )
    with pytest.raises(TypeError):
        entry.payload["n"] = 2  # type: ignore[index]


def test_the_scheduler_refuses_a_payload_its_schema_rejects_and_duplicate_names() -> None:
    scheduler = Scheduler(KafkaSettings(bootstrap="127.0.0.1:1"))  # never connects here
    base = {"schedule": "* * * * *", "queue": "q", "tenant": "t"}
    with pytest.raises(CronConfigError, match=r"'bad': field 'payload': .*'n'.*long"):
        scheduler.add(CronEntry(name="bad", type="noop", payload={"n": "one"}, **base))
    with pytest.raises(CronConfigError, match=r"'nope': field 'payload': .*no schema"):
        scheduler.add(CronEntry(name="nope", type="no_such_type", **base))
    scheduler.add(CronEntry(name="ok", type="noop", payload={"n": 1}, **base))
    with pytest.raises(CronConfigError, match="'ok': field 'name': another entry"):
        scheduler.add(CronEntry(name="ok", type="noop", **base))
    assert [e.name for e in scheduler.entries] == ["ok"]


# -- the state record and the list -----------------------------------------------------


def test_a_last_fire_round_trips_as_json_milliseconds() -> None:
    fire = LastFire(at=datetime(2025, 3, 30, 1, 0, tzinfo=UTC), job_id="abc")
    value = encode_last_fire(fire)
    assert value == b'{"last_fire_ms":1743296400000,"job_id":"abc"}'
    assert decode_last_fire(value) == fire


@pytest.mark.parametrize("value", [b"not json", b"[]", b'{"last_fire_ms": "1"}', b"\xff"])
def test_a_foreign_state_value_is_refused(value: bytes) -> None:
    with pytest.raises(ValueError):
        decode_last_fire(value)


def test_the_list_shows_next_fires_in_the_zone_and_in_utc() -> None:
    entries = parse(EXAMPLE).entries
    now = datetime(2025, 3, 29, 12, 0, tzinfo=UTC)
    last = {"heartbeat": LastFire(at=datetime(2025, 3, 29, 11, 59, 58, tzinfo=UTC))}
    report, heartbeat = list_rows(entries, last, now)
    assert (report.next_local, report.next_utc, report.last_fire) == (
        "2025-03-30 03:00:00 CEST",  # 02:30 does not exist that night
        "2025-03-30T01:00:00Z",
        "never",
    )
    assert (heartbeat.next_utc, heartbeat.last_fire) == (
        "2025-03-29T12:00:02Z",
        "2025-03-29T11:59:58Z",
    )
    [unknown, _] = list_rows(entries, None, now)
    assert unknown.last_fire.startswith("unknown")


def test_the_documented_example_loads() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "scheduling.md").read_text()
    example = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    [entry] = parse(example).entries
    assert (entry.name, entry.timezone, entry.misfire) == (
        "nightly-report",
        "Europe/Berlin",
        MisfirePolicy.CATCH_UP_ONCE,
    )
