"""``leasekeeper`` command line."""

from __future__ import annotations

import click

from jobcore.localkafka.cli import kafka_cli


@click.group()
def main() -> None:
    """The lease-tracking sidecar of the job queue."""


@main.group()
def dev() -> None:
    """Development helpers (a local Kafka)."""


dev.add_command(kafka_cli)
