"""``--config FILE``: a command's options read from a TOML file.

A deployment keeps its rare knobs (breaker rules, retry tiers, tenant limits) in
one reviewed file instead of a 40-flag command line. Each key is an option's name
without its dashes (``window-records = 5000``; ``window_records`` works too), so the
file needs no documentation of its own beyond ``--help``. What is on the command
line or in an option's environment variable wins over the file, and the file over
the built-in defaults: click's ``default_map`` is exactly that layer.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def _keys(command: click.Command) -> dict[str, click.Option]:
    """Every spelling a file may use for each option of ``command``."""
    keys: dict[str, click.Option] = {}
    for param in command.params:
        if not isinstance(param, click.Option) or param.name in (None, "config_file"):
            continue
        for opt in (*param.opts, *param.secondary_opts):
            if opt.startswith("--"):
                keys[opt[2:]] = keys[opt[2:].replace("-", "_")] = param
    return keys


def _with_guess(key: str, keys: dict[str, click.Option]) -> str:
    close = difflib.get_close_matches(key, [k for k in keys if "_" not in k], n=1)
    return f"{key} (did you mean {close[0]}?)" if close else key


def defaults_from(path: Path, command: click.Command) -> dict[str, Any]:
    """The file's values as ``default_map`` entries; a clear error names what is wrong."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise click.BadParameter(f"cannot read {path}: {exc}", param_hint="--config") from None
    keys = _keys(command)
    unknown = sorted(key for key in data if key not in keys)
    if unknown:
        named = ", ".join(_with_guess(key, keys) for key in unknown)
        raise click.BadParameter(
            f"{path}: no such option of {command.name}: {named} "
            f"(keys are option names without the dashes, as in --help)",
            param_hint="--config",
        )
    defaults: dict[str, Any] = {}
    for key, value in data.items():
        param = keys[key]
        if isinstance(value, dict):
            raise click.BadParameter(
                f"{path}: {key} is a table; write {command.name}'s options at the top level",
                param_hint="--config",
            )
        if key.replace("_", "-") in {o.lstrip("-") for o in param.secondary_opts}:
            value = not value  # ``no-status = true`` is the flag's off side
        if param.multiple and not isinstance(value, list):
            value = [value]
        assert param.name is not None
        defaults[param.name] = value
    return defaults


def _load(ctx: click.Context, param: click.Parameter, path: Path | None) -> None:
    if path is not None:
        ctx.default_map = {**(ctx.default_map or {}), **defaults_from(path, ctx.command)}


def config_option(command: F) -> F:
    """Add ``--config FILE`` to ``command``; it is read before every other option."""
    return click.option(
        "--config",
        "config_file",
        type=click.Path(path_type=Path, dir_okay=False, exists=True),
        is_eager=True,
        expose_value=False,
        callback=_load,
        help="TOML file of this command's options (keys: option names without the dashes, "
        "e.g. window-records = 5000); the command line and environment win over it",
    )(command)
