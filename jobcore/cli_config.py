"""``--config FILE``: a command's options read from a TOML file.

A deployment keeps its rare knobs (breaker rules, retry tiers, tenant limits) in
one reviewed file instead of a 40-flag command line. Each key is an option's name
without its dashes (``window-records = 5000``; ``window_records`` works too), so the
file needs no documentation of its own beyond ``--help``, and each value is checked
by its option's own type, as the same text on the command line would be. A relative
path is read from the file's folder. What is on the command line or in an option's
environment variable wins over the file, and the file over the built-in defaults:
click's ``default_map`` is exactly that layer.
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
        for opt in param.opts:
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
    return {keys[key].name or key: _value(path, key, keys[key], v) for key, v in data.items()}


def _value(path: Path, key: str, param: click.Option, value: object) -> object:
    """What the command line would have given: text, so the option's own type checks
    it as it checks a flag (``1.5`` is no count of records); a path relative to the
    file's folder; true or false only for an on/off flag."""
    where = f"{path}: {key}"
    if isinstance(value, dict):
        raise click.BadParameter(
            f"{where} is a table; write the options at the top level", param_hint="--config"
        )
    if param.is_flag:
        if not isinstance(value, bool):
            raise click.BadParameter(f"{where} takes true or false", param_hint="--config")
        return value
    if isinstance(value, list) and not param.multiple:
        raise click.BadParameter(f"{where} takes one value, not a list", param_hint="--config")
    values = value if isinstance(value, list) else [value]
    texts = []
    for one in values:
        if isinstance(one, bool | dict | list):
            raise click.BadParameter(
                f"{where}: {one!r} is not a value of {param.opts[0]}", param_hint="--config"
            )
        text = str(one)
        if isinstance(param.type, click.Path) and not Path(text).is_absolute():
            text = str(path.parent / text)
        texts.append(text)
    return texts if param.multiple else texts[0]


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
