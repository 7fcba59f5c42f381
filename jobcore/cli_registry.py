"""``--schema-registry URL`` and ``--schema-registry-config FILE``: one definition
for every command that encodes or decodes, and the exit its mistakes get.

Without a URL (flag, ``SCHEMA_REGISTRY_URL``, or ``url`` in the config file) a
command keeps the embedded file registry; with one it writes the Confluent wire
format and reads both.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from jobcore.schema_registry import (
    ENV_SCHEMA_REGISTRY_CONFIG,
    ENV_SCHEMA_REGISTRY_URL,
    RegistrySettings,
    RegistrySetupError,
    open_registry,
)
from schemas.codec import SchemaError, SchemaRegistry
from schemas.confluent import RegistryUnavailable

__all__ = ["SchemaSetupFailed", "registry_settings", "schema_registry_options", "schemas_for"]

_F = TypeVar("_F", bound=Callable[..., Any])


class SchemaSetupFailed(click.ClickException):
    """A schema or registry mistake a person must fix: exit 2, like a Kafka setup error."""

    exit_code = 2


def schema_registry_options(command: _F) -> _F:
    """Adds ``schema_registry`` (URL) and ``schema_registry_config`` (Path) parameters."""
    url = click.option(
        "--schema-registry",
        "schema_registry",
        envvar=ENV_SCHEMA_REGISTRY_URL,
        show_envvar=True,
        default=None,
        metavar="URL",
        help="Schema Registry URL: write the Confluent wire format, read both formats "
        "[default: the embedded file registry]",
    )
    config = click.option(
        "--schema-registry-config",
        "schema_registry_config",
        envvar=ENV_SCHEMA_REGISTRY_CONFIG,
        show_envvar=True,
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Registry client properties (basic.auth.user.info, ssl.*, "
        "value.subject.name.strategy, schema.cache.dir)",
    )
    return url(config(command))


def registry_settings(url: str | None, config: Path | None) -> RegistrySettings | None:
    """The settings, or a one-line exit 2 naming the file and the fix."""
    try:
        return RegistrySettings.load(url, config)
    except RegistrySetupError as exc:
        raise SchemaSetupFailed(f"{exc} (fix --schema-registry-config)") from None


def schemas_for(
    schema_dirs: Sequence[str | Path],
    *,
    url: str | None,
    config: Path | None,
    prefix: str,
    queues: Iterable[str] = (),
    stop: threading.Event | None = None,
    attempts: int | None = 5,
) -> SchemaRegistry:
    """The file registry, or a registry-mode one with ``queues``' schema ids resolved
    (retried with backoff while the registry is down, ``attempts`` times; None: forever)."""
    settings = registry_settings(url, config)
    try:
        if settings is None:
            return SchemaRegistry(extra_dirs=schema_dirs)
        registry = open_registry(
            settings, schema_dirs, prefix=prefix, queues=queues, stop=stop, attempts=attempts
        )
    except (SchemaError, RegistrySetupError) as exc:
        raise SchemaSetupFailed(str(exc)) from None
    except RegistryUnavailable as exc:
        raise SchemaSetupFailed(
            f"the schema registry did not answer ({exc}) and the schema ids are not "
            "cached; start it, or check --schema-registry / --schema-registry-config"
        ) from None
    context = click.get_current_context(silent=True)
    if context is not None:  # the command's HTTP client lives as long as the command
        context.call_on_close(registry.close)
    return registry
