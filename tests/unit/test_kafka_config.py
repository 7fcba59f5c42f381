"""Kafka client properties files, settings resolution, error classification, backoff."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from jobcore.config import DEFAULT_BOOTSTRAP, Environment
from jobcore.kafka import (
    ErrorKind,
    ErrorWatch,
    KafkaError,
    KafkaException,
    KafkaSetupError,
    classify,
    classify_error,
    through_transient,
)
from jobcore.kafka_retry import Backoff, Stopped, until_done
from jobcore.properties import PropertiesError, load_properties, parse_properties


def test_properties_accept_every_separator_and_skip_comments() -> None:
    text = (
        "# managed cluster\n"
        "  ! another comment\n"
        "\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism: SCRAM-SHA-256\n"
        "sasl.username   alice\n"
        "sasl.password = s3cr#t!\n"
    )
    assert parse_properties(text) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": "s3cr#t!",
    }


def test_properties_unescape_like_java() -> None:
    text = "key\\=with\\:seps = a\\tb\\u00e9\\\\\nempty=\npath=C:\\\\certs\n"
    assert parse_properties(text) == {
        "key=with:seps": "a\tb\u00e9\\",
        "empty": "",
        "path": "C:\\certs",
    }


def test_properties_join_continued_lines() -> None:
    text = "sasl.jaas.config=one \\\n    two \\\n    three\nnext=1\nodd=ends\\\\\n"
    assert parse_properties(text) == {
        "sasl.jaas.config": "one two three",
        "next": "1",
        "odd": "ends\\",
    }


def test_properties_name_the_file_and_line_of_a_mistake(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("ok=1\nbad=\\u12\n")
    with pytest.raises(PropertiesError, match=r"client.properties: line 2: malformed"):
        load_properties(path)
    with pytest.raises(PropertiesError, match="cannot read Kafka config file"):
        load_properties(tmp_path / "missing.properties")


def _env(**changes: object) -> Environment:
    base = Environment(
        bootstrap=DEFAULT_BOOTSTRAP,
        leasekeeper_target="unix:x",
        leasekeeper_token=None,
        topic_prefix="jobs",
        schema_path=(),
    )
    return Environment(**{**base.__dict__, **changes})  # type: ignore[arg-type]


def test_settings_take_the_file_into_extra_and_its_bootstrap_last(tmp_path: Path) -> None:
    path = tmp_path / "k.properties"
    path.write_text("bootstrap.servers=file:9093\nsecurity.protocol=SASL_SSL\n")
    from_file = _env(kafka_config=path).kafka("c")
    assert from_file.bootstrap == "file:9093"
    assert dict(from_file.extra) == {"security.protocol": "SASL_SSL"}
    from_env = _env(kafka_config=path, bootstrap="env:1", bootstrap_from_env=True).kafka("c")
    assert from_env.bootstrap == "env:1"
    flag = _env(kafka_config=path).kafka("c", bootstrap="flag:2", kafka_config=path)
    assert flag.bootstrap == "flag:2"
    assert _env().kafka("c").bootstrap == DEFAULT_BOOTSTRAP


def test_settings_install_the_error_watch() -> None:
    settings = _env().kafka("c")
    assert settings.base()["error_cb"] is settings.watch


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (KafkaError._TRANSPORT, ErrorKind.TRANSIENT),
        (KafkaError._ALL_BROKERS_DOWN, ErrorKind.TRANSIENT),
        (KafkaError._DESTROY_BROKER, ErrorKind.TRANSIENT),
        (KafkaError._TIMED_OUT, ErrorKind.TRANSIENT),
        (KafkaError.COORDINATOR_NOT_AVAILABLE, ErrorKind.TRANSIENT),
        (KafkaError._AUTHENTICATION, ErrorKind.SETUP),
        (KafkaError.SASL_AUTHENTICATION_FAILED, ErrorKind.SETUP),
        (KafkaError._INVALID_ARG, ErrorKind.SETUP),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, ErrorKind.SETUP),
        (KafkaError.GROUP_AUTHORIZATION_FAILED, ErrorKind.SETUP),
        (KafkaError.INVALID_REQUEST, ErrorKind.OTHER),
    ],
)
def test_errors_are_classified(code: int, kind: ErrorKind) -> None:
    assert classify_error(KafkaError(code)) is kind
    assert classify(KafkaException(KafkaError(code))) is kind


def test_classify_looks_through_wrappers() -> None:
    try:
        try:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        except KafkaException as inner:
            raise RuntimeError("creating topic failed") from inner
    except RuntimeError as outer:
        assert classify(outer) is ErrorKind.TRANSIENT
    assert classify(KafkaSetupError("queue missing")) is ErrorKind.SETUP
    assert classify(TimeoutError()) is ErrorKind.TRANSIENT
    assert classify(ValueError()) is ErrorKind.OTHER


def test_backoff_doubles_up_to_its_cap() -> None:
    backoff = Backoff(base_s=0.5, cap_s=4.0)
    assert [backoff.delay(step) for step in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert backoff.delay(10_000) == 4.0


class _Flaky:
    def __init__(self, failures: int, code: int = KafkaError._TRANSPORT) -> None:
        self.failures = failures
        self.code = code
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise KafkaException(KafkaError(self.code))
        return "done"


_FAST = Backoff(base_s=0.001, cap_s=0.002)


def test_until_done_retries_transient_errors_and_logs_each_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    action = _Flaky(3)
    stop = threading.Event()
    result = until_done(action, what="testing", stop=stop, watch=ErrorWatch(), backoff=_FAST)
    assert result == "done" and action.calls == 4
    retries = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(retries) == 3 and all("testing" in m and "transport failure" in m for m in retries)


def test_until_done_gives_up_at_once_on_setup_errors() -> None:
    action = _Flaky(5, code=KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        until_done(action, what="t", stop=threading.Event(), watch=ErrorWatch(), backoff=_FAST)
    assert action.calls == 1


def test_until_done_fails_fast_on_a_credential_error_reported_to_error_cb() -> None:
    watch = ErrorWatch()
    action = _Flaky(100)

    def refused() -> str:
        watch(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error"))
        return action()

    with pytest.raises(KafkaSetupError, match="rejected the credentials"):
        until_done(refused, what="t", stop=threading.Event(), watch=watch, backoff=_FAST)
    assert action.calls == 1


def test_until_done_stops_when_asked() -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(Stopped):
        until_done(_Flaky(1), what="t", stop=stop, watch=ErrorWatch(), backoff=_FAST)


def _invoke(main: object, args: list[str], env: dict[str, str]) -> tuple[int, str]:
    from click.testing import CliRunner

    result = CliRunner().invoke(main, args, env=env)  # type: ignore[arg-type]
    return result.exit_code, result.output


def _commands(tmp_path: Path) -> list[tuple[object, list[str]]]:
    from leasekeeper.ops.cli import main as leasekeeper
    from producer.cli import main as producer

    state = ["--state-dir", str(tmp_path / "state"), "--listen", f"unix:{tmp_path}/s.sock"]
    return [
        (producer, ["create-queue", "q", "--partitions", "1"]),
        (producer, ["cancel", "q", "job-1"]),
        (leasekeeper, ["serve", "--queue", "q", *state]),
    ]


def test_an_unknown_security_protocol_exits_2_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SASL_BOGUS\n")
    for main, args in _commands(tmp_path):
        code, output = _invoke(main, [*args, "--kafka-config", str(config)], {})
        assert code == 2, output
        assert output.count("\n") == 1 and output.startswith("Error: "), output
        assert "security.protocol" in output and "SASL_BOGUS" in output


def test_a_missing_config_file_named_by_the_environment_exits_2(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.properties"
    for main, args in _commands(tmp_path):
        code, output = _invoke(main, args, {"KAFKA_CONFIG": str(missing)})
        assert code == 2, output
        assert "nowhere.properties" in output and "KAFKA_CONFIG" in output, output
        assert "Traceback" not in output


def test_a_call_is_made_again_through_transient_errors_until_its_time_is_up() -> None:
    now = [0.0]
    calls: list[int] = []

    def pause(seconds: float) -> None:
        now[0] += seconds

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        return "read"

    assert through_transient(flaky, until=5, clock=lambda: now[0], sleep=pause) == "read"
    assert len(calls) == 3 and now[0] == 1.0

    def down() -> str:
        raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE))

    with pytest.raises(KafkaException):
        through_transient(down, until=5, clock=lambda: now[0], sleep=pause)
    assert now[0] == 5.0, "again until the time was up, then the error as it came"

    def refused() -> str:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    with pytest.raises(KafkaException):
        through_transient(refused, until=60, clock=lambda: now[0], sleep=pause)
    assert now[0] == 5.0, "not again: no retry fixes a refusal"
