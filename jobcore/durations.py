"""How every command line spells a length of time: ``--delay 10m``, ``--lease 30s``,
``--connect-timeout 2s``, or plain seconds as before (``--lease 30``).

One parser and one click type, so every duration option accepts the same forms and
says the same thing about a bad one.
"""

from __future__ import annotations

import re
from datetime import timedelta

import click

__all__ = ["DELAY", "DURATION", "POSITIVE_DURATION", "DurationType", "parse_duration", "shown"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)?$")


def parse_duration(text: str) -> timedelta:
    """``"90s"``, ``"10m"``, ``"2h"``, ``"3d"``, ``"250ms"``, ``"1.5h"``, or plain seconds
    (``"45"``, ``"2.5"``); ValueError otherwise."""
    match = _PATTERN.match(text.strip())
    if match is None:
        raise ValueError(
            f"invalid duration {text!r}: seconds (e.g. 90) or a number and a unit "
            "(ms, s, m, h, d), e.g. 90s, 10m, 2h, 3d"
        )
    number, unit = match.groups()
    return timedelta(seconds=float(number) * _UNITS[unit or "s"])


def shown(seconds: float) -> str:
    """A default as ``--help`` shows it: ``30s``, ``10m``, ``1h``, ``1d``."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


class DurationType(click.ParamType[float, object]):
    """A click type for durations, converted to seconds (float); a number given as a
    default (``default=30.0``) passes through, so defaults can stay plain seconds."""

    name = "duration"

    def __init__(self, *, positive: bool = False, noun: str = "duration") -> None:
        self.positive = positive
        # How a bad value is named: "invalid delay '10 minutes'" for --delay.
        self.noun = noun

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            seconds = float(value)
        else:
            try:
                seconds = parse_duration(str(value)).total_seconds()
            except ValueError as exc:
                self.fail(
                    str(exc).replace("invalid duration", f"invalid {self.noun}", 1), param, ctx
                )
        if self.positive and seconds <= 0:
            self.fail(f"{value!r} must be longer than 0", param, ctx)
        return seconds


DURATION = DurationType()
# For a length that 0 makes meaningless (a job's timeout).
POSITIVE_DURATION = DurationType(positive=True)
DELAY = DurationType(noun="delay")
