"""``producer schemas check`` and ``producer schemas register``: for a deploy pipeline.

``check`` exits 1 with the incompatible fields named when a local ``.avsc``
may not follow what readers already have; ``register`` does the same check, then
registers what is new (idempotent). The runtime never registers on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from jobcore.cli_env import environment, schema_path_option, topic_prefix_option
from jobcore.cli_registry import (
    SchemaSetupFailed,
    registry_settings,
    schema_registry_options,
    schemas_for,
)
from jobcore.schema_registry import ConfluentRegistryClient, RegistrySetupError
from producer.schema_check import (
    CheckOutcome,
    CheckResult,
    check_files,
    check_registry,
    register_all,
)
from schemas.confluent import ConfluentSchemaRegistry, RegistryUnavailable

_SCHEMA_PATH = schema_path_option()
_QUEUES = click.option(
    "--queue",
    "queues",
    multiple=True,
    help="A queue whose envelope and dead-letter subjects to include (repeatable).",
)


@click.group()
def schemas() -> None:
    """Check schema changes for compatibility, and register them."""


@schemas.command("check")
@_QUEUES
@_SCHEMA_PATH
@topic_prefix_option
@schema_registry_options
def check(
    queues: Sequence[str],
    schema_paths: Sequence[str],
    schema_registry: str | None,
    schema_registry_config: Path | None,
) -> None:
    """Test every local schema against the versions readers have (the registry's
    subjects, or schemas/history/ without a registry); exit 1 if one is incompatible."""
    results = _check(queues, schema_paths, schema_registry, schema_registry_config)
    _report(results)


@schemas.command("register")
@_QUEUES
@_SCHEMA_PATH
@topic_prefix_option
@schema_registry_options
def register(
    queues: Sequence[str],
    schema_paths: Sequence[str],
    schema_registry: str | None,
    schema_registry_config: Path | None,
) -> None:
    """Check, then register every schema not registered yet (idempotent)."""
    if registry_settings(schema_registry, schema_registry_config) is None:
        raise SchemaSetupFailed("register needs --schema-registry URL (or SCHEMA_REGISTRY_URL)")
    results = _check(queues, schema_paths, schema_registry, schema_registry_config)
    _report(results)
    registry, client = _registry(schema_paths, schema_registry, schema_registry_config)
    try:
        for result in register_all(registry, client, results):
            if result.outcome is CheckOutcome.REGISTERED:
                click.echo(f"registered   {result.subject}")
    except (RegistrySetupError, RegistryUnavailable) as exc:
        raise SchemaSetupFailed(f"registration failed: {exc}") from None


def _check(
    queues: Sequence[str], schema_paths: Sequence[str], url: str | None, config: Path | None
) -> list[CheckResult]:
    if registry_settings(url, config) is None:
        local = schemas_for(schema_paths, url=None, config=None, prefix="")
        return check_files(local)
    registry, client = _registry(schema_paths, url, config)
    try:
        return check_registry(registry, client, queues)
    except (RegistrySetupError, RegistryUnavailable) as exc:
        raise SchemaSetupFailed(f"cannot check against the registry: {exc}") from None


def _registry(
    schema_paths: Sequence[str], url: str | None, config: Path | None
) -> tuple[ConfluentSchemaRegistry, ConfluentRegistryClient]:
    env = environment()
    registry = schemas_for(schema_paths, url=url, config=config, prefix=env.topic_prefix)
    assert isinstance(registry, ConfluentSchemaRegistry)
    client = registry.client
    assert isinstance(client, ConfluentRegistryClient)
    return registry, client


def _report(results: Sequence[CheckResult]) -> None:
    """One line per subject; exit 1 naming the fields when any is incompatible."""
    for result in results:
        click.echo(result.line())
    bad = [r.subject for r in results if r.outcome is CheckOutcome.INCOMPATIBLE]
    if bad:
        raise click.ClickException(
            f"incompatible: {', '.join(bad)}; keep the old fields (give new ones defaults) "
            "or publish the change under a new job type"
        )
