"""How every command line fails: one or two lines and a documented exit code for an
expected mistake, the traceback only when asked for.

The top-level groups (``producer``, ``leasekeeper``, ``workers``) use
:class:`FriendlyGroup`, which adds ``--debug`` and turns an unexpected exception into
one line naming it, so a person never reads a page of frames to find the one line
that matters. ``--debug`` or ``LOG_LEVEL=debug`` shows the traceback.

Exit codes: 1 a failure, 2 a usage or setup mistake (a bad flag value, a config
file, credentials, a missing queue), 3 Kafka or the leasekeeper could not be reached.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Callable
from enum import IntEnum
from typing import Any, TypeVar

import click

__all__ = [
    "LOG_LEVELS",
    "ExitCode",
    "FriendlyGroup",
    "Misuse",
    "SetupMistake",
    "Unreachable",
    "debug_wanted",
    "log_level_option",
]

_F = TypeVar("_F", bound=Callable[..., Any])

ENV_LOG_LEVEL = "LOG_LEVEL"
LOG_LEVELS = ("debug", "info", "warning", "error")


class ExitCode(IntEnum):
    """The exit codes of every command, documented in the README's troubleshooting."""

    FAILURE = 1
    SETUP = 2
    UNREACHABLE = 3


class Unreachable(click.ClickException):
    """Kafka or the leasekeeper did not answer: exit 3, so a script can tell "nobody
    there" from a mistake in what it asked for."""

    exit_code = ExitCode.UNREACHABLE


class Misuse(click.ClickException):
    """A usage mistake shown problem first: ``Error: Invalid value for '--log-level'
    ...`` and then where to read more, instead of the usage synopsis above the one
    line that matters."""

    exit_code = ExitCode.SETUP

    def __init__(self, error: click.UsageError) -> None:
        super().__init__(error.format_message())
        ctx = error.ctx
        self.hint = f"Try '{ctx.command_path} {ctx.help_option_names[0]}' for help." if ctx else ""

    def show(self, file: Any = None) -> None:
        click.echo(f"Error: {self.format_message()}", file=file or sys.stderr)
        if self.hint:
            click.echo(self.hint, file=file or sys.stderr)


class SetupMistake(click.ClickException):
    """A setting that cannot work as given, found after the flags were parsed (such
    as a leasekeeper socket another user owns): exit 2, like a bad flag."""

    exit_code = ExitCode.SETUP


def debug_wanted(ctx: click.Context | None = None) -> bool:
    """``--debug`` on the command line or ``LOG_LEVEL=debug`` in the environment (both
    read by click into the ``--debug`` option of the top-level group)."""
    ctx = ctx or click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.find_root().meta.get("debug"))


class _DebugOption(click.Option):
    """``--debug``, also set by ``LOG_LEVEL=debug``: the variable names a level, not a
    boolean, so only ``debug`` (any case) turns it on."""

    def value_from_envvar(self, ctx: click.Context) -> Any:
        text = self.resolve_envvar_value(ctx)
        if text is None:
            return None
        return text.strip().lower() == "debug"


def _remember_debug(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    ctx.meta["debug"] = value
    if value:
        logging.getLogger().setLevel(logging.DEBUG)
    return value


class FriendlyGroup(click.Group):
    """A group whose commands never end in a traceback unless ``--debug`` asks."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(
            _DebugOption(
                ["--debug"],
                is_flag=True,
                envvar=ENV_LOG_LEVEL,
                show_envvar=True,
                expose_value=False,
                is_eager=True,
                callback=_remember_debug,
                help="Show the traceback of a failure (also LOG_LEVEL=debug).",
            )
        )

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.Abort, KeyboardInterrupt, SystemExit):
            raise
        except click.UsageError as exc:
            if debug_wanted(ctx):
                _print_chain(exc)
            raise Misuse(exc) from None
        except click.ClickException as exc:
            if debug_wanted(ctx):
                _print_chain(exc)
            raise
        except Exception as exc:
            if debug_wanted(ctx):
                raise
            raise click.ClickException(
                f"{type(exc).__name__}: {exc} (a bug, or a case without its own message; "
                "run again with --debug for the traceback)"
            ) from None


def _print_chain(exc: BaseException) -> None:
    """The traceback of a one-line error and of what caused it, even ``from None``."""
    cause = exc.__cause__ or exc.__context__
    if cause is not None:
        traceback.print_exception(cause, file=sys.stderr)
    traceback.print_exception(exc, file=sys.stderr)


def _normal_level(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    return (value or "info").upper()


def log_level_option(default: str = "info") -> Callable[[_F], _F]:
    """``--log-level``, the same case-insensitive choice on every long-running command
    [env LOG_LEVEL]; the value comes back upper-case, as ``logging`` spells it."""
    return click.option(
        "--log-level",
        type=click.Choice(LOG_LEVELS, case_sensitive=False),
        default=default,
        envvar=ENV_LOG_LEVEL,
        show_default=True,
        callback=_normal_level,
        show_envvar=True,
        help="How much to log.",
    )
