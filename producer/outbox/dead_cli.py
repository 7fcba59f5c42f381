"""``producer outbox dead list|retry|drop``: the rows the relay set aside.

Each command names the database it used (never its password) and says what it
did, row by row, so an operator sees which jobs came back and which are gone.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click
import psycopg
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from jobcore.plain import plain
from producer.outbox.dead import DeadRow, Selection, dead_rows, drop, retry
from producer.outbox.dsn import dsn_option, dsn_source
from producer.outbox.failures import DeadReason
from producer.outbox.report import database_of
from schemas.codec import EnvelopeCodec, SchemaRegistry

__all__ = ["dead"]

_T = TypeVar("_T")
_REASONS = click.Choice([r.value for r in DeadReason])
_WIDTH = 160


def _filters(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option("--queue", default=None, help="Only rows of this queue."),
            click.option("--tenant", default=None, help="Only rows of this tenant."),
            click.option(
                "--reason", type=_REASONS, default=None, help="Only rows set aside for this."
            ),
        ]
    ):
        command = option(command)
    return command


@click.group("dead")
def dead() -> None:
    """Rows the relay set aside because they can never be sent (job_outbox_dead)."""


@dead.command("list")
@dsn_option
@_filters
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON array, for scripts.")
def list_(
    dsn: str, queue: str | None, tenant: str | None, reason: str | None, limit: int, as_json: bool
) -> None:
    """Show the set-aside rows, oldest first, with why and when."""
    selection = Selection(queue=queue, tenant=tenant, reason=reason)
    rows = _with_db(dsn, lambda conn: dead_rows(conn, selection, limit))
    if as_json:
        click.echo(json.dumps([plain(row) for row in rows], indent=2))
        return
    if not rows:
        click.echo(f"no dead outbox rows in {_where(dsn)}")
        return
    console = Console()
    console.width = max(console.width, _WIDTH)  # errors are long: never squeeze them
    console.print(_table(rows))


def _chosen(command: Callable[[str, Selection], None]) -> Callable[..., None]:
    """The options of a command that acts on chosen dead rows (ids, or ``--all``,
    narrowed by the filters), handed to ``command`` as one ``Selection``."""

    @functools.wraps(command)
    def chosen(
        dsn: str,
        ids: Sequence[int],
        every: bool,
        queue: str | None,
        tenant: str | None,
        reason: str | None,
    ) -> None:
        command(dsn, _selection(ids, every, queue, tenant, reason))

    every = click.option("--all", "every", is_flag=True, help="Every row the filters match.")
    return dsn_option(click.argument("ids", nargs=-1, type=int)(every(_filters(chosen))))


@dead.command("retry")
@_chosen
def retry_(dsn: str, selection: Selection) -> None:
    """Stage rows again at the end of job_outbox (same job ids) once the cause is fixed;
    the rows of their ordering keys that waited go behind them."""
    codec = EnvelopeCodec(SchemaRegistry())
    done = _with_db(dsn, lambda conn: retry(conn, selection, codec))
    for row, new_id in done:
        click.echo(f"retried dead row {row.id} (job {row.job_id}) as job_outbox row {new_id}")
    click.echo(f"{len(done)} rows staged again in {_where(dsn)}")


@dead.command("drop")
@_chosen
def drop_(dsn: str, selection: Selection) -> None:
    """Delete rows for good (their jobs never run); their ordering keys go on."""
    done = _with_db(dsn, lambda conn: drop(conn, selection))
    for row in done:
        click.echo(f"dropped dead row {row.id} (job {row.job_id}, queue {row.queue})")
    click.echo(f"{len(done)} rows dropped from {_where(dsn)}")


def _selection(
    ids: Sequence[int], every: bool, queue: str | None, tenant: str | None, reason: str | None
) -> Selection:
    if bool(ids) == every:
        raise click.UsageError(
            "give the dead row ids (see producer outbox dead list) or --all, not both"
            if ids
            else "give the dead row ids (see producer outbox dead list) or --all"
        )
    return Selection(ids=list(ids) or None, queue=queue, tenant=tenant, reason=reason)


def _with_db(dsn: str, action: Callable[[psycopg.Connection[Any]], _T]) -> _T:
    """Run ``action`` on a connection; a database problem is one line with the fix."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            return action(conn)
    except psycopg.errors.UndefinedTable:
        raise click.ClickException(
            f"{_where(dsn)} (from {dsn_source()}) has no job_outbox_dead table; create it: "
            "producer outbox init with the same database (safe on an existing outbox)"
        ) from None
    except psycopg.errors.UniqueViolation as exc:
        detail = exc.diag.message_detail or str(exc).strip().splitlines()[0]
        raise click.ClickException(
            f"nothing retried: a job is already staged in job_outbox ({detail}); drop its "
            "dead row instead, or retry the others by id"
        ) from None
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise click.ClickException(
            f"cannot use PostgreSQL at {_where(dsn)} (from {dsn_source()}): {reason}; check "
            "the DSN, that the server runs, and the user's rights"
        ) from None


def _where(dsn: str) -> str:
    """The database as host:port/dbname, or what is wrong with the DSN."""
    try:
        return database_of(dsn)
    except psycopg.Error:
        return "an invalid connection string"


def _table(rows: Sequence[DeadRow]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title=f"{len(rows)} dead outbox rows")
    for name in ("id", "queue", "tenant", "type", "ordering key", "reason", "error", "dead at"):
        table.add_column(
            name,
            overflow="fold",
            justify="right" if name == "id" else "left",
            no_wrap=name in ("id", "reason"),
            ratio=3 if name == "error" else None,
        )
    for row in rows:
        cells = (row.queue, row.tenant_id, row.type or "-", row.ordering_key or "-",
                 row.reason, row.error, f"{row.dead_at:%Y-%m-%d %H:%M:%S %Z}")  # fmt: skip
        table.add_row(str(row.id), *(Text(cell) for cell in cells))  # Text: no markup
    return table
