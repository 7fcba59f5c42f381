"""What a handler raises, and how an exception becomes a nack.

The leasekeeper decides retry or dead letter; the worker only reports what
happened. A handler says "try again later" with `Retry`, "this will never
work" with `Permanent`; anything else is an ordinary failure that the
leasekeeper retries with backoff until ``max_attempts``.
"""

from __future__ import annotations

import math
import traceback
from dataclasses import dataclass, replace
from datetime import timedelta

from schemas.vocabulary import ErrorClass

# The leasekeeper stores the traceback with the job's error history; the tail
# is where the cause is, and a bounded size keeps records small.
TRACEBACK_LIMIT = 2048
MESSAGE_LIMIT = 1024

UNKNOWN_JOB_TYPE = ErrorClass.UNKNOWN_JOB_TYPE.value
PAYLOAD_DECODE_ERROR = ErrorClass.PAYLOAD_DECODE_ERROR.value
JOB_TIMEOUT = ErrorClass.JOB_TIMEOUT.value
DEPENDENCY_DOWN = ErrorClass.DEPENDENCY_DOWN.value


class Retry(Exception):
    """Raise to fail this attempt and ask for the next one no sooner than ``after``.

    Use it for a dependency that said "later" (HTTP 429 / 503 with
    Retry-After). ``after=None`` leaves the delay to the leasekeeper's backoff.
    The attempt still counts towards ``max_attempts``.
    """

    def __init__(self, message: str = "", *, after: float | timedelta | None = None) -> None:
        super().__init__(message)
        seconds = after.total_seconds() if isinstance(after, timedelta) else after
        if seconds is not None and not (math.isfinite(seconds) and seconds >= 0):
            # NaN or inf would reach the leasekeeper's backoff arithmetic; a
            # mistake in the handler is better reported where it was made.
            raise ValueError(
                f"Retry(after=...) must be a finite, non-negative number of seconds, got {seconds}"
            )
        self.after: float | None = None if seconds is None else float(seconds)


class DependencyDown(Retry):
    """Raise when a dependency the job type needs is down (not this job's fault): the
    leasekeeper opens the circuit breaker of the job's type at once, on every
    leasekeeper of the queue, so its other jobs wait (parked, no attempt spent)
    instead of failing one by one. ``after`` is how long the dependency said it
    stays down: this job's retry delay and the least cool-down of the breaker.
    This attempt counts, as a ``Retry`` does; it is recorded as ``DependencyDown``.
    """


class Permanent(Exception):
    """Raise when retrying cannot help (bad input, a 400): the job goes straight to the DLQ."""


@dataclass(frozen=True, kw_only=True)
class Failure:
    """A classified failure, ready to become a NACK settlement."""

    error_class: str
    message: str
    traceback: str = ""
    retry_after_s: float = 0.0
    permanent: bool = False


def _tail(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return "..." + text[-(limit - 3) :]


def _head(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_traceback(exc: BaseException) -> str:
    """The last ``TRACEBACK_LIMIT`` characters of the exception's traceback."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return _tail(text, TRACEBACK_LIMIT)


def classify(exc: BaseException) -> Failure:
    """Turn what a handler raised into the nack the leasekeeper acts on.

    ``Retry`` and ``Permanent`` report the handler's own cause when it chained
    one (``raise Retry(...) from exc``), so the error history names the real
    failure rather than the control-flow exception.
    """
    cause = exc.__cause__ if isinstance(exc, Retry | Permanent) and exc.__cause__ else exc
    message = str(exc) or str(cause)
    failure = Failure(
        error_class=type(cause).__qualname__,
        message=_head(message, MESSAGE_LIMIT),
        traceback=format_traceback(exc),
    )
    if isinstance(exc, DependencyDown):
        named = f"{type(cause).__qualname__}: {message}" if cause is not exc else message
        return replace(failure, error_class=DEPENDENCY_DOWN, message=_head(named, MESSAGE_LIMIT),
                       retry_after_s=exc.after or 0.0)  # fmt: skip
    if isinstance(exc, Retry):
        return replace(failure, retry_after_s=exc.after or 0.0)
    if isinstance(exc, Permanent):
        return replace(failure, permanent=True)
    return failure
