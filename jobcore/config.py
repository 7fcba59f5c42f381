"""Settings shared by producer, leasekeeper and workers, read once at the edge (by the
command line parser, or :meth:`Environment.from_env` for a Python caller) and passed
in as values; nothing here is a global singleton."""

from __future__ import annotations

import logging
import os
import stat
import tempfile
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from jobcore.kafka import KafkaSettings
from jobcore.properties import load_properties

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP"
ENV_KAFKA_CONFIG = "KAFKA_CONFIG"
ENV_LEASEKEEPER_TARGET = "LEASEKEEPER_TARGET"
ENV_LEASEKEEPER_TOKEN = "LEASEKEEPER_TOKEN"
ENV_LEASEKEEPER_TLS_CA = "LEASEKEEPER_TLS_CA"
# A uid besides this user and root whose --target socket a worker connects to.
ENV_TRUST_OWNER = "LEASEKEEPER_TRUST_OWNER"
ENV_TOPIC_PREFIX = "JOBS_TOPIC_PREFIX"
ENV_SCHEMA_PATH = "JOBS_SCHEMA_PATH"
ENV_GC = "JOBS_GC"  # `default`: keep Python's collector settings (jobcore.gc_tuning)

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
SOCKET_NAME = "leasekeeper.sock"
ENV_LOCAL_KAFKA_DIR = "LOCAL_KAFKA_DIR"

log = logging.getLogger(__name__)


class BootstrapOrigin(StrEnum):
    """Where the Kafka address came from: an error about an unreachable broker names
    it, so a person knows which setting to change."""

    FLAG = "--bootstrap"
    ENV = "KAFKA_BOOTSTRAP"
    CONFIG_FILE = "bootstrap.servers of the Kafka config file"
    DEV_KAFKA = "recorded by `leasekeeper dev kafka start`"
    DEFAULT = "default"


def recorded_dev_bootstrap(environ: dict[str, str] | None = None) -> str | None:
    """The address of a local Kafka started by ``dev kafka start`` whose processes
    still run, so a second terminal without ``export KAFKA_BOOTSTRAP`` finds it.
    The record belongs to the development tools, imported here only when asked: an
    image without them has no local Kafka to find."""
    try:
        from devtools.dev_cluster import recorded_bootstrap
    except ImportError:
        return None
    return recorded_bootstrap(environ)


DEFAULT_LEASE_S = 30
DEFAULT_MAX_ATTEMPTS = 8
DEFAULT_TIMEOUT_S = 30.0
# gRPC metadata key carrying the shared token when the leasekeeper is exposed.
AUTH_METADATA_KEY = "x-leasekeeper-token"
# The largest message a worker accepts from its leasekeeper (and sends to it). Kafka
# refuses records over max.message.bytes (1 MB by default), and a claimed job carries
# its record and payload: a few MB even where that limit was raised tenfold.
RPC_MESSAGE_BYTES = 64 * 1024 * 1024
# The leasekeeper stops adding jobs to a claim's answer before their encoded size
# passes this (it always sends at least one): the rest of the message (a Settle's
# results, framing) fits in the difference, so no answer is refused for its size.
CLAIM_ANSWER_BYTES = RPC_MESSAGE_BYTES - 8 * 1024 * 1024


def default_leasekeeper_target(
    environ: dict[str, str] | None = None, *, queue: str | None = None
) -> str:
    """``unix:`` + a socket in a directory of this user's own: ``$XDG_RUNTIME_DIR`` when
    set, else one per user id under the temp directory, so users of one machine never
    share (or squat) each other's socket directory. The leasekeeper creates it 0700.

    The socket is named after the queue (``emails.sock``), so ``workers run --queue
    emails`` and ``inspect --queue emails`` in another terminal find the leasekeeper
    of ``serve --queue emails`` with no address to copy."""
    name = f"{queue}.sock" if queue else SOCKET_NAME
    return f"unix:{socket_directory(environ) / name}"


def socket_directory(environ: dict[str, str] | None = None) -> Path:
    """The private directory of this user's default sockets."""
    env = os.environ if environ is None else environ
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "kafka-lease-queue"
    return Path(tempfile.gettempdir()) / f"kafka-lease-queue-{os.getuid()}"


def queues_with_sockets(environ: dict[str, str] | None = None) -> list[str]:
    """The queues whose leasekeepers have a socket in the default directory (a
    leasekeeper killed with SIGKILL leaves its socket behind, so this may list one
    that no longer answers). Only this user's sockets in a directory of this user's
    count: one another user made is no leasekeeper of ours (a worker then aims at
    the default socket, and refuses it, saying who owns it)."""
    directory = socket_directory(environ)
    try:
        if directory.stat().st_uid != os.getuid():
            return []
        found = sorted(directory.glob("*.sock"))
        return [path.stem for path in found if _own_socket(path) and path.name != SOCKET_NAME]
    except OSError:
        return []


def _own_socket(path: Path) -> bool:
    try:
        info = path.stat()
    except OSError:  # gone since it was listed
        return False
    return stat.S_ISSOCK(info.st_mode) and info.st_uid == os.getuid()


def schema_path_from_env(environ: dict[str, str] | None = None) -> tuple[str, ...]:
    """The directories of ``JOBS_SCHEMA_PATH``: every command and ``JobProducer()`` add
    them to the schemas they load, and ``--schema-path`` adds more."""
    env = os.environ if environ is None else environ
    return tuple(p for p in env.get(ENV_SCHEMA_PATH, "").split(os.pathsep) if p)


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
    # The address ``dev kafka start`` recorded, used when nothing else names one.
    dev_bootstrap: str | None = None
    # LEASEKEEPER_TARGET was set: it wins over the per-queue default socket.
    leasekeeper_target_from_env: bool = False

    @classmethod
    def from_env(cls) -> Environment:
        """The settings of a Python caller, from the process environment. Commands do
        not use this: click reads each variable as its flag's default
        (``jobcore.cli_env.environment``)."""
        kafka_config = os.environ.get(ENV_KAFKA_CONFIG)
        return cls(
            bootstrap=os.environ.get(ENV_BOOTSTRAP, DEFAULT_BOOTSTRAP),
            leasekeeper_target=os.environ.get(ENV_LEASEKEEPER_TARGET)
            or default_leasekeeper_target(),
            leasekeeper_token=os.environ.get(ENV_LEASEKEEPER_TOKEN) or None,
            leasekeeper_tls_ca=os.environ.get(ENV_LEASEKEEPER_TLS_CA) or None,
            topic_prefix=os.environ.get(ENV_TOPIC_PREFIX, "jobs"),
            schema_path=schema_path_from_env(),
            bootstrap_from_env=bool(os.environ.get(ENV_BOOTSTRAP)),
            kafka_config=Path(kafka_config) if kafka_config else None,
            dev_bootstrap=None if os.environ.get(ENV_BOOTSTRAP) else recorded_dev_bootstrap(),
            leasekeeper_target_from_env=bool(os.environ.get(ENV_LEASEKEEPER_TARGET)),
        )

    def target(self, given: str | None = None, *, queue: str | None = None) -> str:
        """The leasekeeper address: the flag, else ``LEASEKEEPER_TARGET``, else the
        default socket of ``queue``; with no queue, the socket of the only queue
        whose leasekeeper has one, else the socket of no queue."""
        if given:
            return given
        if self.leasekeeper_target_from_env:
            return self.leasekeeper_target
        if not queue:
            # One leasekeeper of this user running: that is the one meant.
            running = queues_with_sockets()
            queue = running[0] if len(running) == 1 else None
        return default_leasekeeper_target(queue=queue)

    def kafka(
        self, client_id: str, *, bootstrap: str | None = None, kafka_config: Path | None = None
    ) -> KafkaSettings:
        """Client settings: librdkafka properties from ``kafka_config`` (else the
        ``KAFKA_CONFIG`` file) go into ``extra``; the bootstrap is the flag, else
        ``KAFKA_BOOTSTRAP``, else the file's ``bootstrap.servers``, else the address
        ``dev kafka start`` recorded, else the default; ``origin`` says which.
        Raises PropertiesError for a file that cannot be read or parsed."""
        path = kafka_config or self.kafka_config
        extra = load_properties(path) if path is not None else {}
        from_file = extra.pop("bootstrap.servers", None)
        candidates = (
            (bootstrap, BootstrapOrigin.FLAG),
            (self.bootstrap if self.bootstrap_from_env else None, BootstrapOrigin.ENV),
            (str(from_file) if from_file else None, BootstrapOrigin.CONFIG_FILE),
            (self.dev_bootstrap, BootstrapOrigin.DEV_KAFKA),
        )
        address, origin = next(((a, o) for a, o in candidates if a), (None, None))
        if address is None or origin is None:
            address, origin = DEFAULT_BOOTSTRAP, BootstrapOrigin.DEFAULT
        if origin is BootstrapOrigin.DEV_KAFKA:
            _say_once(f"using Kafka at {address}, {origin.value} (KAFKA_BOOTSTRAP is unset)")
        return KafkaSettings(
            bootstrap=address, client_id=client_id, extra=extra, origin=origin.value
        )


_said: set[str] = set()


def _say_once(message: str) -> None:
    """Log ``message`` at INFO the first time only: several clients are built per run."""
    if message not in _said:
        _said.add(message)
        log.info("%s", message)
