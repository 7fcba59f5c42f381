"""Settings shared by producer, leasekeeper and workers, read from the environment once
at the edge (CLI) and passed in as values; nothing here is a global singleton."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from jobcore.kafka import KafkaSettings

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP"
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

    @classmethod
    def from_env(cls) -> Environment:
        schema_path = os.environ.get(ENV_SCHEMA_PATH, "")
        return cls(
            bootstrap=os.environ.get(ENV_BOOTSTRAP, DEFAULT_BOOTSTRAP),
            leasekeeper_target=os.environ.get(ENV_LEASEKEEPER_TARGET)
            or default_leasekeeper_target(),
            leasekeeper_token=os.environ.get(ENV_LEASEKEEPER_TOKEN) or None,
            leasekeeper_tls_ca=os.environ.get(ENV_LEASEKEEPER_TLS_CA) or None,
            topic_prefix=os.environ.get(ENV_TOPIC_PREFIX, "jobs"),
            schema_path=tuple(p for p in schema_path.split(os.pathsep) if p),
        )

    def kafka(self, client_id: str) -> KafkaSettings:
        return KafkaSettings(bootstrap=self.bootstrap, client_id=client_id)
