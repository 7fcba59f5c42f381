"""``workers`` command line."""

from __future__ import annotations

import click


@click.group()
def main() -> None:
    """Run job handlers that claim work from a leasekeeper."""
