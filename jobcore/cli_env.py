"""The options every command reads from the environment, each through click's ``envvar=``.

A setting has one name on the command line and one in the environment, and click
reads both, so ``--help`` shows the variable beside the flag and every command
reads it the same way. The values the commands share (Kafka, topic prefix,
schema path, leasekeeper address and token) are remembered on the click context
as they are parsed; :func:`environment` gathers them into the one
:class:`~jobcore.config.Environment` value the rest of the code takes.

Two settings add rather than replace: ``--schema-path`` adds its directories to
those of ``JOBS_SCHEMA_PATH`` in every command, as it always did.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import click
from click.core import ParameterSource

from jobcore.config import (
    DEFAULT_BOOTSTRAP,
    ENV_LEASEKEEPER_TARGET,
    ENV_LEASEKEEPER_TLS_CA,
    ENV_LEASEKEEPER_TOKEN,
    ENV_SCHEMA_PATH,
    ENV_TOPIC_PREFIX,
    Environment,
    default_leasekeeper_target,
    recorded_dev_bootstrap,
)
from jobcore.priority import ENV_PRIORITY_CLASSES, PriorityClasses

__all__ = [
    "ENV_DASHBOARD_TOKEN",
    "SecretFromEnvironment",
    "dashboard_token_option",
    "environment",
    "from_environment",
    "leasekeeper_client_options",
    "priority_classes_option",
    "remember",
    "schema_path_option",
    "token_option",
    "topic_prefix_option",
]

_F = TypeVar("_F", bound=Callable[..., Any])
_META = "jobcore.environment"

ENV_DASHBOARD_TOKEN = "DASHBOARD_TOKEN"


def remember(name: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A callback keeping an option's value and where it came from on the context
    (shared by a group and its subcommands), for :func:`environment`."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        source = ctx.get_parameter_source(param.name or name)
        seen: dict[str, tuple[Any, ParameterSource | None]] = ctx.meta.setdefault(_META, {})
        if _replaces(seen.get(name), value, source):
            seen[name] = (value, source)
        return value

    return callback


def _replaces(
    before: tuple[Any, ParameterSource | None] | None, value: Any, source: ParameterSource | None
) -> bool:
    """Whether a subcommand's value replaces its group's: not when unset, and its
    variable does not win over the group's flag."""
    if before is None:
        return True
    if value is None:
        return False
    return source is ParameterSource.COMMANDLINE or before[1] is not ParameterSource.COMMANDLINE


def _seen(ctx: click.Context | None) -> dict[str, tuple[Any, ParameterSource | None]]:
    if ctx is None:
        return {}
    seen: dict[str, tuple[Any, ParameterSource | None]] = ctx.meta.get(_META, {})
    return seen


def from_environment(name: str, ctx: click.Context | None = None) -> bool:
    """Whether option ``name`` of the running command got its value from its variable."""
    ctx = ctx or click.get_current_context(silent=True)
    return _seen(ctx).get(name, (None, None))[1] is ParameterSource.ENVIRONMENT


def environment(ctx: click.Context | None = None) -> Environment:
    """The settings the running command was given (flags and their variables); what
    a command did not declare takes its default."""
    ctx = ctx or click.get_current_context(silent=True)
    seen = _seen(ctx)

    def value(name: str, default: Any = None) -> Any:
        found = seen.get(name, (None, None))[0]
        return default if found is None else found

    bootstrap_from_env = from_environment("bootstrap", ctx) and bool(value("bootstrap"))
    config = value("kafka_config")
    return Environment(
        bootstrap=value("bootstrap", DEFAULT_BOOTSTRAP),
        bootstrap_from_env=bootstrap_from_env,
        kafka_config=Path(config) if config else None,
        dev_bootstrap=None if bootstrap_from_env else recorded_dev_bootstrap(),
        leasekeeper_target=value("target") or default_leasekeeper_target(),
        leasekeeper_target_from_env=from_environment("target", ctx) and bool(value("target")),
        leasekeeper_token=value("token") or None,
        leasekeeper_tls_ca=value("tls_ca") or None,
        topic_prefix=value("topic_prefix", "jobs"),
        schema_path=tuple(value("schema_path", ())),
    )


def topic_prefix_option(command: _F) -> _F:
    """``--topic-prefix`` [env JOBS_TOPIC_PREFIX]: topics are ``PREFIX.QUEUE...``."""
    return click.option(
        "--topic-prefix",
        envvar=ENV_TOPIC_PREFIX,
        show_envvar=True,
        default="jobs",
        show_default=True,
        expose_value=False,
        callback=remember("topic_prefix"),
        help="Prefix of every topic name (PREFIX.QUEUE, PREFIX.QUEUE.dlq, ...).",
    )(command)


def _existing_flag_dirs(ctx: click.Context, param: click.Parameter, value: Any) -> tuple[str, ...]:
    """The directories given with the flag, then those of the variable: the flag adds to
    ``JOBS_SCHEMA_PATH`` (click alone would let it replace the variable)."""
    given = tuple(str(v) for v in value or () if v)
    source = ctx.get_parameter_source(param.name or "schema_path")
    if source is ParameterSource.COMMANDLINE:
        for directory in given:
            if not Path(directory).is_dir():
                raise click.BadParameter(f"directory {directory!r} does not exist")
        assert isinstance(param, click.Option)
        extra = param.value_from_envvar(ctx) or ()
        given = (*given, *(str(d) for d in extra if d))
    dirs = tuple(dict.fromkeys(given))
    remember("schema_path")(ctx, param, dirs)
    return dirs


def schema_path_option(name: str = "schema_paths") -> Callable[[_F], _F]:
    """``--schema-path DIR`` (repeatable) [env JOBS_SCHEMA_PATH, directories joined by
    ``:``]: extra job-type schemas; the flag adds to the variable's directories.
    The command gets the sum as ``name``."""
    return click.option(
        "--schema-path",
        name,
        multiple=True,
        envvar=ENV_SCHEMA_PATH,
        show_envvar=True,
        type=click.Path(file_okay=False),
        callback=_existing_flag_dirs,
        help="Extra directory of job-type schemas (repeatable; adds to the variable's "
        "directories).",
    )


def priority_classes_option(command: _F) -> _F:
    """``--priority-classes`` [env JOBS_PRIORITY_CLASSES]: class names and weights, which
    producer and leasekeeper must agree on; the command gets ``priority_classes``."""

    def parse(ctx: click.Context, param: click.Parameter, value: str | None) -> PriorityClasses:
        if not value or not value.strip():
            return PriorityClasses()
        origin = (
            ENV_PRIORITY_CLASSES
            if ctx.get_parameter_source("priority_classes") is ParameterSource.ENVIRONMENT
            else "--priority-classes"
        )
        try:
            return PriorityClasses.parse(value, origin=origin)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None

    return click.option(
        "--priority-classes",
        "priority_classes",
        envvar=ENV_PRIORITY_CLASSES,
        show_envvar=True,
        default=None,
        metavar="NAME=WEIGHT,...",
        callback=parse,
        help="Priority classes and their weights; producer and leasekeeper must agree "
        "[default: critical=6,default=3,bulk=1].",
    )(command)


class SecretFromEnvironment(click.Option):
    """A secret read by click from its variable only: ``--help`` lists it as
    ``$NAME``, and the flag is refused, since a command line shows in process
    listings to every user of the machine."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        return f"${self.envvar}", f"{self.help} [environment only]"

    def process_value(self, ctx: click.Context, value: Any) -> Any:
        if ctx.get_parameter_source(self.name or "") is ParameterSource.COMMANDLINE:
            raise click.BadParameter(
                f"set {self.envvar} in the environment instead: a command line shows in "
                "process listings",
                ctx=ctx,
                param=self,
            )
        return super().process_value(ctx, value)


def _secret(flag: str, name: str, envvar: str, help_text: str, **kwargs: Any) -> Any:
    return click.option(
        flag,
        name,
        cls=SecretFromEnvironment,
        envvar=envvar,
        show_envvar=True,
        default=None,
        help=help_text,
        **kwargs,
    )


def token_option(help_text: str) -> Callable[[_F], _F]:
    """The leasekeeper's shared token [LEASEKEEPER_TOKEN, environment only]."""
    return cast(
        Callable[[_F], _F],
        _secret(
            "--token",
            "token",
            ENV_LEASEKEEPER_TOKEN,
            help_text,
            expose_value=False,
            callback=remember("token"),
        ),
    )


def target_option(
    flag: str = "--target", name: str = "target", help_text: str = ""
) -> Callable[[_F], _F]:
    """The leasekeeper's address [env LEASEKEEPER_TARGET], given to the command as
    ``name`` and remembered as ``target``."""
    return click.option(
        flag,
        name,
        envvar=ENV_LEASEKEEPER_TARGET,
        show_envvar=True,
        default=None,
        callback=remember("target"),
        help=help_text
        or "The leasekeeper's unix:PATH or HOST:PORT [default: the socket of "
        "--queue, or of the only leasekeeper of this user].",
    )


def tls_ca_option(command: _F) -> _F:
    """``--tls-ca`` [env LEASEKEEPER_TLS_CA]: reach a TLS leasekeeper over TCP."""
    return click.option(
        "--tls-ca",
        "tls_ca",
        envvar=ENV_LEASEKEEPER_TLS_CA,
        show_envvar=True,
        type=click.Path(dir_okay=False),
        default=None,
        callback=remember("tls_ca"),
        help="CA certificate (PEM) to reach a TLS leasekeeper over TCP.",
    )(command)


def leasekeeper_client_options(command: _F) -> _F:
    """``--target``, ``--token`` and ``--tls-ca``: how a client reaches a leasekeeper."""
    with_token = token_option("Shared token of a leasekeeper listening on TCP.")(command)
    return target_option()(tls_ca_option(with_token))


def dashboard_token_option(help_text: str) -> Callable[[_F], _F]:
    """The dashboard's token [DASHBOARD_TOKEN, environment only], given to the command
    as ``dashboard_token``."""
    return cast(
        Callable[[_F], _F],
        _secret("--dashboard-token", "dashboard_token", ENV_DASHBOARD_TOKEN, help_text),
    )


def declared_envvars(command: click.Command) -> dict[str, Sequence[str]]:
    """Option name → the variables it reads (for tests and docs)."""
    found: dict[str, Sequence[str]] = {}
    for param in command.params:
        envvar = getattr(param, "envvar", None)
        if envvar:
            found[param.name or ""] = [envvar] if isinstance(envvar, str) else list(envvar)
    return found
