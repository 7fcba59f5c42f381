"""Where the outbox commands read the database's connection string.

A password in ``--dsn`` shows in ``ps`` and ``/proc/*/cmdline`` to every user of
the host, so the DSN is also read from ``OUTBOX_DSN`` or from a file
(``--dsn-file``, e.g. a mounted secret); ``--dsn`` still works for a DSN without a
password (or a password in ``~/.pgpass`` or ``PGPASSWORD``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

__all__ = ["ENV_OUTBOX_DSN", "dsn_option", "dsn_source"]

ENV_OUTBOX_DSN = "OUTBOX_DSN"
_SOURCE = "producer.outbox.dsn_source"


def dsn_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--dsn`` (or ``OUTBOX_DSN``) and ``--dsn-file``, handed to ``command`` as one
    ``dsn`` argument; one of them is required."""

    @functools.wraps(command)
    def with_dsn(*args: Any, dsn: str | None, dsn_file: Path | None, **kwargs: Any) -> Any:
        return command(*args, dsn=_resolve(dsn, dsn_file), **kwargs)

    with_dsn = click.option(
        "--dsn-file",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Read the connection string from this file (e.g. a mounted secret).",
    )(with_dsn)
    return click.option(
        "--dsn",
        envvar=ENV_OUTBOX_DSN,
        show_envvar=True,
        default=None,
        help="PostgreSQL connection string of the application's database "
        "(e.g. 'host=db dbname=shop user=app' or postgresql://...). On the command "
        f"line it shows in `ps`: put a password in {ENV_OUTBOX_DSN}, --dsn-file or ~/.pgpass.",
    )(with_dsn)


def dsn_source() -> str:
    """Where the command's DSN came from, for an error naming what to fix."""
    ctx = click.get_current_context(silent=True)
    return str(ctx.meta.get(_SOURCE, "--dsn")) if ctx is not None else "--dsn"


def _resolve(dsn: str | None, dsn_file: Path | None) -> str:
    ctx = click.get_current_context()
    source = ctx.get_parameter_source("dsn")
    if dsn_file is None:
        if not dsn:
            raise click.UsageError(
                f"no database: pass --dsn-file PATH, set {ENV_OUTBOX_DSN}, or pass --dsn DSN"
            )
        ctx.meta[_SOURCE] = ENV_OUTBOX_DSN if source is ParameterSource.ENVIRONMENT else "--dsn"
        return dsn
    if dsn and source is ParameterSource.COMMANDLINE:
        raise click.UsageError("--dsn and --dsn-file both given: pass one of them")
    try:
        text = dsn_file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(
            f"cannot read {dsn_file}: {exc}", param_hint="--dsn-file"
        ) from None
    if not text:
        raise click.BadParameter(
            f"{dsn_file} is empty; write the connection string in it", param_hint="--dsn-file"
        )
    ctx.meta[_SOURCE] = f"--dsn-file {dsn_file}"
    return text
