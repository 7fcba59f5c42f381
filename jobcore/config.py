"""Settings shared by producer, leasekeeper and workers, read from the environment once
at the edge (CLI) and passed in as values; nothing here is a global singleton."""

from __future__ import annotations

import os
from dataclasses import dataclass

from jobcore.kafka import KafkaSettings

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP"
ENV_LEASEKEEPER_TARGET = "LEASEKEEPER_TARGET"
ENV_LEASEKEEPER_TOKEN = "LEASEKEEPER_TOKEN"
ENV_TOPIC_PREFIX = "JOBS_TOPIC_PREFIX"
ENV_SCHEMA_PATH = "JOBS_SCHEMA_PATH"

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
# gRPC target of a leasekeeper: "unix:PATH" (default) or "HOST:PORT" (loopback).
DEFAULT_LEASEKEEPER_TARGET = "unix:/tmp/kafka-lease-queue/leasekeeper.sock"
DEFAULT_LEASE_S = 30
DEFAULT_MAX_ATTEMPTS = 8
DEFAULT_TIMEOUT_S = 30.0
# gRPC metadata key carrying the shared token when the leasekeeper is exposed.
AUTH_METADATA_KEY = "x-leasekeeper-token"


@dataclass(frozen=True, kw_only=True)
class Environment:
    """What the CLIs read from the environment, gathered in one value."""

    bootstrap: str
    leasekeeper_target: str
    leasekeeper_token: str | None
    topic_prefix: str
    schema_path: tuple[str, ...]

    @classmethod
    def from_env(cls) -> Environment:
        schema_path = os.environ.get(ENV_SCHEMA_PATH, "")
        return cls(
            bootstrap=os.environ.get(ENV_BOOTSTRAP, DEFAULT_BOOTSTRAP),
            leasekeeper_target=os.environ.get(ENV_LEASEKEEPER_TARGET, DEFAULT_LEASEKEEPER_TARGET),
            leasekeeper_token=os.environ.get(ENV_LEASEKEEPER_TOKEN) or None,
            topic_prefix=os.environ.get(ENV_TOPIC_PREFIX, "jobs"),
            schema_path=tuple(p for p in schema_path.split(os.pathsep) if p),
        )

    def kafka(self, client_id: str) -> KafkaSettings:
        return KafkaSettings(bootstrap=self.bootstrap, client_id=client_id)
