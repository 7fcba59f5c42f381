"""Keep trying a Kafka call while the cluster is unreachable; give up at once on a
mistake only a person can fix.

A long-running process (the leasekeeper) must outlive a broker outage at start-up
as well as later: ``restart: on-failure`` cannot help a process that exits 0 or a
crash loop that hammers a cluster that is down. So transient errors are retried
with capped exponential backoff and one log line per step naming the reason;
setup errors (credentials, configuration, authorization, a missing queue) raise
``KafkaSetupError`` for the caller to report and exit with.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from jobcore.kafka import ErrorKind, ErrorWatch, classify

__all__ = ["Backoff", "Stopped", "until_done"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class Stopped(Exception):
    """The stop event was set while waiting to retry."""


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """Capped exponential delays: ``base_s * 2**step``, never above ``cap_s``."""

    base_s: float = 0.5
    cap_s: float = 30.0

    def delay(self, step: int) -> float:
        if step >= 64:  # 2**64 overflows nothing but says nothing either
            return self.cap_s
        return float(min(self.cap_s, self.base_s * 2.0**step))


def until_done(
    action: Callable[[], _T],
    *,
    what: str,
    stop: threading.Event,
    watch: ErrorWatch,
    backoff: Backoff = Backoff(),
) -> _T:
    """Run ``action`` until it returns. Transient Kafka errors wait and retry (unless
    ``stop`` is set: raises Stopped); a setup error reported by any client of these
    settings raises KafkaSetupError; anything else propagates as it is."""
    step = 0
    while True:
        watch.raise_if_setup_error()
        try:
            return action()
        except Exception as exc:
            watch.raise_if_setup_error()
            if classify(exc) is not ErrorKind.TRANSIENT:
                raise
            reason = _reason(exc, watch)
        delay = backoff.delay(step)
        log.warning("Kafka not reachable while %s (%s); retrying in %.1fs", what, reason, delay)
        if stop.wait(delay):
            raise Stopped(what)
        step += 1


def _reason(exc: Exception, watch: ErrorWatch) -> str:
    """The call's own error, and what the clients last reported (e.g. which broker
    refused the connection), which the call's error often hides."""
    first = exc.args[0] if exc.args else exc
    text = first.str() if hasattr(first, "str") else str(exc)
    last = watch.last_reason()
    return text if last is None or last == text else f"{text}; last client error: {last}"
