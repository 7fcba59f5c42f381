"""``leasekeeper`` command line: serve, inspect, dev kafka."""

from __future__ import annotations

import click

from jobcore.cli_errors import FriendlyGroup
from leasekeeper.breaker.cli import breaker
from leasekeeper.dashboard.cli import dashboard
from leasekeeper.dlq.cli import dlq
from leasekeeper.ops.inspect_cli import inspect
from leasekeeper.ops.serve_cli import serve
from leasekeeper.ordering.cli import ordering


@click.group(cls=FriendlyGroup)
def main() -> None:
    """The lease-tracking sidecar of the job queue."""


class _DevCommands(click.Group):
    """``dev`` subcommands, imported only when one is asked for: the runtime never loads
    the development package, so a deployment does not depend on it."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return ["kafka"]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name != "kafka":
            return None
        try:
            from devtools.localkafka.cli import kafka_cli
        except ModuleNotFoundError as exc:
            raise click.ClickException(
                f"leasekeeper dev kafka needs the development tools ({exc.name} is not "
                "installed here); run it from a source checkout (make venv)"
            ) from None
        return kafka_cli


@main.group(cls=_DevCommands)
def dev() -> None:
    """Development helpers (a local Kafka)."""


main.add_command(serve)
main.add_command(inspect)
main.add_command(dlq)
main.add_command(dashboard)
main.add_command(breaker)
main.add_command(ordering)
