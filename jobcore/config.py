"""Settings shared by producer, leasekeeper and workers, read from the environment once
at the edge (CLI) and passed in as values; nothing here is a global singleton."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from jobcore.kafka import KafkaSettings
from jobcore.properties import load_properties

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP"
ENV_KAFKA_CONFIG = "KAFKA_CONFIG"
ENV_LEASEKEEPER_TARGET = "LEASEKEEPER_TARGET"
ENV_LEASEKEEPER_TOKEN = "LEASEKEEPER_TOKEN"
ENV_LEASEKEEPER_TLS_CA = "LEASEKEEPER_TLS_CA"
ENV_TOPIC_PREFIX = "JOBS_TOPIC_PREFIX"
ENV_SCHEMA_PATH = "JOBS_SCHEMA_PATH"

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
SOCKET_NAME = "leasekeeper.sock"
DEFAULT_LEASE_S = 30
DEFAULT_MAX_ATTEMPTS = 8
DEFAULT_TIMEOUT_S = 30.0
# gRPC metadata key carrying the shared token when the leasekeeper is exposed.
AUTH_METADATA_KEY = "x-leasekeeper-token"


def default_leasekeeper_target(environ: dict[str, str] | None = None) -> str:
    """``unix:`` + a socket in a directory of this user's own: ``$XDG_RUNTIME_DIR`` when
    set, else one per user id under the temp directory, so users of one machine never
    share (or squat) each other's socket directory. The leasekeeper creates it 0700."""
    env = os.environ if environ is None else environ
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        directory = Path(runtime) / "kafka-lease-queue"
    else:
        directory = Path(tempfile.gettempdir()) / f"kafka-lease-queue-{os.getuid()}"
    return f"unix:{directory / SOCKET_NAME}"


@dataclass(frozen=True, kw_only=True)
class Environment:
    """What the CLIs read from the environment, gathered in one value."""

    bootstrap: str
    leasekeeper_target: str
    leasekeeper_token: str | None
    # A CA bundle file: when set, workers and inspect reach the leasekeeper over TLS.
    leasekeeper_tls_ca: str | None = None
    topic_prefix: str
    schema_path: tuple[str, ...]
    # Where ``bootstrap`` came from matters: a --kafka-config file's
    # bootstrap.servers wins over the built-in default, not over KAFKA_BOOTSTRAP.
    bootstrap_from_env: bool = False
    kafka_config: Path | None = None

    @classmethod
    def from_env(cls) -> Environment:
        schema_path = os.environ.get(ENV_SCHEMA_PATH, "")
        kafka_config = os.environ.get(ENV_KAFKA_CONFIG)
        return cls(
            bootstrap=os.environ.get(ENV_BOOTSTRAP, DEFAULT_BOOTSTRAP),
            leasekeeper_target=os.environ.get(ENV_LEASEKEEPER_TARGET)
            or default_leasekeeper_target(),
            leasekeeper_token=os.environ.get(ENV_LEASEKEEPER_TOKEN) or None,
            leasekeeper_tls_ca=os.environ.get(ENV_LEASEKEEPER_TLS_CA) or None,
            topic_prefix=os.environ.get(ENV_TOPIC_PREFIX, "jobs"),
            schema_path=tuple(p for p in schema_path.split(os.pathsep) if p),
            bootstrap_from_env=bool(os.environ.get(ENV_BOOTSTRAP)),
            kafka_config=Path(kafka_config) if kafka_config else None,
        )

    def kafka(
        self, client_id: str, *, bootstrap: str | None = None, kafka_config: Path | None = None
    ) -> KafkaSettings:
        """Client settings: librdkafka properties from ``kafka_config`` (else the
        ``KAFKA_CONFIG`` file) go into ``extra``; the bootstrap is the flag, else
        ``KAFKA_BOOTSTRAP``, else the file's ``bootstrap.servers``, else the default.
        Raises PropertiesError for a file that cannot be read or parsed."""
        path = kafka_config or self.kafka_config
        extra = load_properties(path) if path is not None else {}
        from_file = extra.pop("bootstrap.servers", None)
        from_env = self.bootstrap if self.bootstrap_from_env else None
        return KafkaSettings(
            bootstrap=bootstrap or from_env or from_file or DEFAULT_BOOTSTRAP,
            client_id=client_id,
            extra=extra,
        )
