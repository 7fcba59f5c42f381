"""The ``--bootstrap`` and ``--kafka-config`` options every Kafka-facing command takes,
and the exit its setup mistakes get.

One definition, so ``producer``, ``producer cron``, ``leasekeeper serve`` and
``leasekeeper dlq`` read Kafka settings the same way and report a bad file the
same way: one line naming the file, where its name came from, and the fix.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from jobcore.cli_env import environment, from_environment, remember
from jobcore.cli_errors import ExitCode, Unreachable, debug_wanted
from jobcore.config import ENV_BOOTSTRAP, ENV_KAFKA_CONFIG, BootstrapOrigin, Environment
from jobcore.durations import DURATION, shown
from jobcore.kafka import (
    ErrorKind,
    KafkaException,
    KafkaSettings,
    KafkaSetupError,
    classify,
    describe_setup_error,
    reachable,
)
from jobcore.properties import PropertiesError

__all__ = [
    "BOOTSTRAP_HELP",
    "DEFAULT_CONNECT_TIMEOUT_S",
    "KafkaSetupFailed",
    "bootstrap_option",
    "connect_timeout_option",
    "kafka_config_option",
    "kafka_failure",
    "kafka_settings",
    "require_kafka",
    "unreachable_message",
]

_F = TypeVar("_F", bound=Callable[..., Any])

BOOTSTRAP_HELP = (
    "Kafka bootstrap servers [default: bootstrap.servers of the --kafka-config file, "
    "else the address `leasekeeper dev kafka start` recorded, else 127.0.0.1:9092]"
)
DEFAULT_CONNECT_TIMEOUT_S = 10.0
_CONFIG_HELP = (
    "librdkafka client properties (security.protocol, sasl.*, ssl.*), in the format of "
    "kcat -F and the Kafka tools' --command-config"
)


class KafkaSetupFailed(click.ClickException):
    """A Kafka setup mistake (a bad config file, wrong credentials, a missing queue):
    exit 2, so a supervisor's ``on-failure`` policy can tell it from a crash."""

    exit_code = ExitCode.SETUP


def connect_timeout_option(command: _F) -> _F:
    """``--connect-timeout``: how long a one-shot command waits for Kafka to answer."""
    option = click.option(
        "--connect-timeout",
        "connect_timeout_s",
        type=DURATION,
        default=shown(DEFAULT_CONNECT_TIMEOUT_S),
        show_default=True,
        help="Give up when Kafka has not answered for this long (10s, 1m); exit 3.",
    )
    return option(command)


def unreachable_message(settings: KafkaSettings) -> str:
    """``cannot reach Kafka at ADDRESS (where it came from; the fix)``."""
    origin = settings.origin or "given"
    if origin == BootstrapOrigin.CONFIG_FILE.value:
        fix = "fix bootstrap.servers in the file, or set KAFKA_BOOTSTRAP or --bootstrap"
    else:
        fix = "set KAFKA_BOOTSTRAP or --bootstrap"
    return (
        f"cannot reach Kafka at {settings.bootstrap} ({origin}; {fix}; "
        "is it running? leasekeeper dev kafka status)"
    )


def require_kafka(settings: KafkaSettings, timeout_s: float) -> None:
    """Fail a one-shot command at once, in one line, when Kafka does not answer
    within ``timeout_s``, rather than after each client's own timeouts (30 s and
    hundreds of client log lines). The client's own logs stay below WARNING unless
    ``--debug``: the one line says what they would."""
    if not debug_wanted():
        logging.getLogger("librdkafka").setLevel(logging.CRITICAL)
        logging.getLogger("jobcore.kafka").setLevel(logging.ERROR)
    try:
        ok = reachable(settings, timeout_s)
    except (KafkaSetupError, KafkaException) as exc:  # a setting librdkafka refused
        raise kafka_failure(exc, settings) from None
    if not ok:
        raise Unreachable(unreachable_message(settings))


def bootstrap_option(command: _F) -> _F:
    """``--bootstrap`` [env KAFKA_BOOTSTRAP]; where the value came from is kept, so an
    unreachable broker's message names the setting to change."""
    option = click.option(
        "--bootstrap",
        envvar=ENV_BOOTSTRAP,
        show_envvar=True,
        default=None,
        callback=remember("bootstrap"),
        help=BOOTSTRAP_HELP,
    )
    return option(command)


def kafka_config_option(command: _F) -> _F:
    """``--kafka-config FILE`` [env KAFKA_CONFIG]."""
    option = click.option(
        "--kafka-config",
        "kafka_config",
        envvar=ENV_KAFKA_CONFIG,
        show_envvar=True,
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        callback=remember("kafka_config"),
        help=_CONFIG_HELP,
    )
    return option(command)


def kafka_settings(
    client_id: str,
    *,
    bootstrap: str | None,
    kafka_config: Path | None,
    env: Environment | None = None,
) -> KafkaSettings:
    """Settings from the flags and their variables, or a one-line exit 2. A value that
    came from a variable is taken from ``env``, which knows it as such."""
    env = env or environment()
    if from_environment("bootstrap"):
        bootstrap = None
    if from_environment("kafka_config"):
        kafka_config = None
    try:
        return env.kafka(client_id, bootstrap=bootstrap, kafka_config=kafka_config)
    except PropertiesError as exc:
        source = "--kafka-config" if kafka_config is not None else ENV_KAFKA_CONFIG
        raise KafkaSetupFailed(f"{exc} (given by {source}); fix the file or the path") from None


def kafka_failure(exc: Exception, settings: KafkaSettings) -> click.ClickException:
    """The error to exit with when a Kafka call failed: the credential or setup
    problem a client reported, if any (exit 2), rather than the timeout it caused."""
    setup = settings.watch.setup_error()
    if setup is not None:
        return KafkaSetupFailed(describe_setup_error(setup))
    if isinstance(exc, KafkaSetupError):
        return KafkaSetupFailed(str(exc))
    if isinstance(exc, KafkaException) and classify(exc) is ErrorKind.SETUP:
        return KafkaSetupFailed(describe_setup_error(exc.args[0]))
    if classify(exc) is ErrorKind.TRANSIENT:
        return Unreachable(unreachable_message(settings))
    return click.ClickException(str(exc) or f"Kafka did not answer ({type(exc).__name__})")
