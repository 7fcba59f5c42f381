"""The one way tests and benchmarks await an event: poll a condition with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["WaitTimedOut", "wait_until"]


class WaitTimedOut(AssertionError, TimeoutError):
    """The condition never held: a failed assertion in a test, a timeout in a benchmark."""


def wait_until(
    predicate: Callable[[], bool],
    timeout: float = 10.0,
    what: str = "",
    step: float = 0.05,
    describe: Callable[[], object] | None = None,
) -> float:
    """Poll ``predicate`` every ``step`` seconds until it holds; return the monotonic time
    it first held. After ``timeout`` seconds, raise naming ``what`` (and ``describe()``,
    the state that explains the wait, when given)."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return time.monotonic()
        if time.monotonic() > deadline:
            state = f": {describe()}" if describe is not None else ""
            raise WaitTimedOut(
                f"timed out after {timeout:g}s waiting for {what or predicate}{state}"
            )
        time.sleep(step)
