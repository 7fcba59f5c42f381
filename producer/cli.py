"""``producer`` command line."""

from __future__ import annotations

import click


@click.group()
def main() -> None:
    """Enqueue jobs onto a Kafka-backed queue."""
