"""Milliseconds from a clock: called several times for every job, so it lives in a
compiled module (``compiled_modules.txt``), where a call from the engine's other
compiled parts is a direct C call instead of an interpreted one."""

from __future__ import annotations

from collections.abc import Callable


def now_ms(clock: Callable[[], float]) -> int:
    return int(clock() * 1000)
