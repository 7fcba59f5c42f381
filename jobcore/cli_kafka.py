"""The ``--bootstrap`` and ``--kafka-config`` options every Kafka-facing command takes,
and the exit its setup mistakes get.

One definition, so ``producer``, ``producer cron``, ``leasekeeper serve`` and
``leasekeeper dlq`` read Kafka settings the same way and report a bad file the
same way: one line naming the file, where its name came from, and the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from jobcore.config import ENV_KAFKA_CONFIG, Environment
from jobcore.kafka import (
    ErrorKind,
    KafkaException,
    KafkaSettings,
    KafkaSetupError,
    classify,
    describe_setup_error,
)
from jobcore.properties import PropertiesError

__all__ = [
    "BOOTSTRAP_HELP",
    "KafkaSetupFailed",
    "kafka_config_option",
    "kafka_failure",
    "kafka_settings",
]

_F = TypeVar("_F", bound=Callable[..., Any])

BOOTSTRAP_HELP = (
    "Kafka bootstrap servers [default: $KAFKA_BOOTSTRAP, else bootstrap.servers of the "
    "--kafka-config file, else 127.0.0.1:9092]"
)
_CONFIG_HELP = (
    "librdkafka client properties (security.protocol, sasl.*, ssl.*), in the format of "
    "kcat -F and the Kafka tools' --command-config [env KAFKA_CONFIG]"
)


class KafkaSetupFailed(click.ClickException):
    """A Kafka setup mistake (a bad config file, wrong credentials, a missing queue):
    exit 2, so a supervisor's ``on-failure`` policy can tell it from a crash."""

    exit_code = 2


def kafka_config_option(command: _F) -> _F:
    option = click.option(
        "--kafka-config",
        "kafka_config",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
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
    """Settings from the flags and the environment, or a one-line exit 2."""
    env = env or Environment.from_env()
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
    return click.ClickException(str(exc) or f"Kafka did not answer ({type(exc).__name__})")
