"""The one adapter to a Schema Registry (``confluent_kafka.schema_registry``).

Registry mode is opt-in: ``--schema-registry URL`` (or ``SCHEMA_REGISTRY_URL``),
with basic auth and TLS from a properties file (``--schema-registry-config``),
in the keys the Confluent serializers use (``schema.registry.`` prefix optional).
Everything else in the project sees the small ``RegistryClient`` protocol of
``schemas.confluent``, so unit tests use a fake and the codec stays pure.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from jobcore.kafka_retry import Backoff
from jobcore.properties import PropertiesError, load_properties
from schemas.confluent import (
    ConfluentSchemaRegistry,
    RegistryUnavailable,
    SubjectStrategy,
)

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import Schema

# ``confluent_kafka.schema_registry`` (and the HTTP and auth libraries under it) is
# imported when a registry is first used, not with this module: every command
# imports this one, registry mode is opt-in, and the import costs a quarter of a
# second of CPU, paid by each worker process and each CLI call in file mode.

__all__ = [
    "ENV_SCHEMA_REGISTRY_CONFIG",
    "ENV_SCHEMA_REGISTRY_URL",
    "ConfluentRegistryClient",
    "RegistrySettings",
    "RegistrySetupError",
    "open_registry",
    "retry_unavailable",
]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

ENV_SCHEMA_REGISTRY_URL = "SCHEMA_REGISTRY_URL"
ENV_SCHEMA_REGISTRY_CONFIG = "SCHEMA_REGISTRY_CONFIG"
_CLIENT_KEYS = frozenset(
    {
        "url",
        "basic.auth.user.info",
        "basic.auth.credentials.source",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "timeout",
    }
)
_STRATEGY_KEYS = ("value.subject.name.strategy", "subject.name.strategy")
_CACHE_KEY = "schema.cache.dir"
_NOT_FOUND = frozenset({40401, 40402, 40403, 404})


class RegistrySetupError(ValueError):
    """A registry setting a person must fix: a bad file, key, credentials or rule."""


@dataclass(frozen=True, kw_only=True)
class RegistrySettings:
    """Where the registry is and how to talk to it; built by :meth:`load`."""

    url: str
    client: dict[str, str] = field(default_factory=dict)
    strategy: SubjectStrategy = SubjectStrategy.TOPIC_NAME
    cache_dir: Path | None = None

    @classmethod
    def load(cls, url: str | None, config: Path | None) -> RegistrySettings | None:
        """Settings from a URL and a properties file; None when neither names a registry."""
        props = _read_config(config)
        url = url or props.pop("url", None)
        props.pop("url", None)
        if not url:
            return None
        strategy = SubjectStrategy.TOPIC_NAME
        for key in _STRATEGY_KEYS:
            if key in props:
                strategy = _strategy(props.pop(key), key, config)
        cache = props.pop(_CACHE_KEY, None)
        unknown = sorted(set(props) - _CLIENT_KEYS)
        if unknown:
            raise RegistrySetupError(
                f"schema registry config {config}: unknown key(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(_CLIENT_KEYS | {_CACHE_KEY, *_STRATEGY_KEYS}))}"
            )
        return cls(
            url=url.rstrip("/"),
            client=props,
            strategy=strategy,
            cache_dir=Path(cache) if cache else _default_cache(url),
        )


def _read_config(config: Path | None) -> dict[str, str]:
    if config is None:
        return {}
    try:
        raw = load_properties(config)
    except PropertiesError as exc:
        message = str(exc).replace("Kafka config", "schema registry config")
        raise RegistrySetupError(message) from None
    return {k.removeprefix("schema.registry."): v for k, v in raw.items()}


def _strategy(text: str, key: str, config: Path | None) -> SubjectStrategy:
    try:
        return SubjectStrategy.parse(text)
    except ValueError as exc:
        raise RegistrySetupError(f"schema registry config {config}: {key}: {exc}") from None


def _default_cache(url: str) -> Path:
    """One cache per registry (ids are only unique within one)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    return Path(base) / "kafka-lease-queue" / "schema-registry" / digest


class ConfluentRegistryClient:
    """``schemas.confluent.RegistryClient`` and the deploy-time calls, over the
    ``confluent_kafka`` client; no answer becomes RegistryUnavailable, a refusal
    (bad credentials, an incompatible schema) RegistrySetupError."""

    def __init__(self, settings: RegistrySettings) -> None:
        conf: dict[str, Any] = {"url": settings.url, "timeout": 5, "max.retries": 1}
        conf.update(settings.client)
        if "timeout" in settings.client:
            conf["timeout"] = int(settings.client["timeout"])
        self.url = settings.url
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self._client = SchemaRegistryClient(conf)

    def close(self) -> None:
        self._client.close()

    def schema_by_id(self, schema_id: int) -> str:
        return str(self._call(lambda: self._client.get_schema(schema_id)).schema_str)

    def id_of(self, subject: str, schema: str) -> int | None:
        found = self._call(lambda: self._client.lookup_schema(subject, _avro(schema)), missing=None)
        return None if found is None else int(found.schema_id)

    def register(self, subject: str, schema: str) -> int:
        return int(self._call(lambda: self._client.register_schema(subject, _avro(schema))))

    def versions(self, subject: str) -> list[str]:
        """Every registered version's schema text under ``subject``, oldest first."""
        numbers: list[int] = self._call(lambda: self._client.get_versions(subject), missing=[])
        return [self._version_text(subject, n) for n in sorted(numbers)]

    def _version_text(self, subject: str, number: int) -> str:
        return str(self._call(lambda: self._client.get_version(subject, number)).schema.schema_str)

    def compatibility(self, subject: str) -> str | None:
        """The subject's own level, or None when it has none of its own."""
        found = self._call(lambda: self._client.get_compatibility(subject), missing=None)
        return None if found is None else str(found)

    def set_compatibility(self, subject: str, level: str) -> None:
        self._call(lambda: self._client.set_compatibility(subject, level))

    def is_compatible(self, subject: str, schema: str) -> bool:
        return bool(self._call(lambda: self._client.test_compatibility(subject, _avro(schema))))

    def _call(self, action: Callable[[], Any], **fallback: Any) -> Any:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            return action()
        except SchemaRegistryError as exc:
            if "missing" in fallback and exc.error_code in _NOT_FOUND:
                return fallback["missing"]
            if exc.http_status_code in (401, 403):
                raise RegistrySetupError(
                    f"schema registry {self.url} refused the credentials "
                    f"(HTTP {exc.http_status_code}); check basic.auth.user.info"
                ) from None
            if exc.http_status_code >= 500 or exc.http_status_code < 0:
                raise RegistryUnavailable(f"{self.url}: {exc.error_message}") from None
            raise RegistrySetupError(f"schema registry {self.url}: {exc.error_message}") from None
        except OSError as exc:
            raise RegistryUnavailable(f"{self.url}: {type(exc).__name__}: {exc}") from None
        except Exception as exc:  # httpx transport errors have no common base here
            if type(exc).__module__.startswith(("httpx", "httpcore")):
                raise RegistryUnavailable(f"{self.url}: {type(exc).__name__}: {exc}") from None
            raise


def _avro(schema: str) -> Schema:
    from confluent_kafka.schema_registry import Schema

    return Schema(json.dumps(json.loads(schema), separators=(",", ":")), "AVRO")


def retry_unavailable(
    action: Callable[[], _T],
    *,
    what: str,
    stop: threading.Event | None = None,
    backoff: Backoff | None = None,
    attempts: int | None = None,
) -> _T:
    """Run ``action``, retrying with capped backoff while the registry does not answer
    (forever, or ``attempts`` times); one warning per step names the reason."""
    stop = stop or threading.Event()
    backoff = backoff or Backoff()
    step = 0
    while True:
        try:
            return action()
        except RegistryUnavailable as exc:
            if attempts is not None and step + 1 >= attempts:
                raise
            delay = backoff.delay(step)
            log.warning(
                "schema registry not reachable while %s (%s); retrying in %.1fs", what, exc, delay
            )
        if stop.wait(delay):
            raise RegistryUnavailable(f"stopped while {what}")
        step += 1


def open_registry(
    settings: RegistrySettings,
    schema_dirs: Iterable[str | os.PathLike[str]] = (),
    *,
    prefix: str = "jobs",
    queues: Iterable[str] = (),
    stop: threading.Event | None = None,
    attempts: int | None = None,
    payloads: bool = True,
) -> ConfluentSchemaRegistry:
    """A registry-mode codec registry with the ids of ``queues``' schemas resolved
    (from the disk cache, else the registry, retried with backoff while it is down).
    ``payloads=False`` resolves only the envelope and dead letter (the leasekeeper's)."""
    registry = ConfluentSchemaRegistry(
        ConfluentRegistryClient(settings),
        schema_dirs,
        prefix=prefix,
        strategy=settings.strategy,
        cache_dir=settings.cache_dir,
    )
    pairs = [
        pair
        for queue in queues
        for pair in registry.queue_subjects(queue)
        if payloads or pair[1] is not None
    ]
    try:
        if pairs:
            retry_unavailable(
                lambda: registry.preflight(pairs),
                what="resolving the schema ids to write with",
                stop=stop,
                attempts=attempts,
            )
    except BaseException:
        registry.close()
        raise
    return registry
