"""Where librdkafka's own log lines go: Python logging (logger ``librdkafka``), at
WARNING and up by default, each repeated line once per window, and the lines that
only say a broker is busy for a moment demoted to DEBUG.

A client whose broker is down says "Connect ... failed" a few times a second, and
one line per window tells a person as much. A broker that has just started, or
moved a coordinator, answers "Coordinator load in progress" for a few seconds;
librdkafka logs that at WARNING (``GETPID``, ``FINDCOORD``, ...) and retries by
itself, so at the default level it only alarms a person in their first hour.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["TRANSIENT", "QuietFilter", "RepeatFilter", "client_logger"]

# Parts of librdkafka lines that say "busy, retrying by itself": logged at DEBUG.
TRANSIENT = ("Coordinator load in progress",)


class RepeatFilter(logging.Filter):
    """Drops a log line that repeats one seen within ``window_s``. Digits are ignored
    when comparing, since counts and durations change between otherwise identical
    lines."""

    def __init__(self, window_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._window_s = window_s
        self._clock = clock
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = "".join(c for c in record.getMessage() if not c.isdigit())
        now = self._clock()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last < self._window_s:
                return False
            if len(self._seen) > 1000:
                self._seen.clear()
            self._seen[key] = now
        return True


class QuietFilter(logging.Filter):
    """Turns a :data:`TRANSIENT` line into a DEBUG record, passed on only when its
    logger is enabled for DEBUG (``LOG_LEVEL=debug``): the logger's own level was
    checked against the line's first level, before any filter ran."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG:
            return True
        message = record.getMessage()
        if not any(part in message for part in TRANSIENT):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def client_logger() -> logging.Logger:
    """The logger librdkafka's lines go to (the client's ``logger`` setting), so they
    are never printed raw as ``%3|...`` on the terminal."""
    logger = logging.getLogger("librdkafka")
    if not any(isinstance(f, RepeatFilter) for f in logger.filters):
        logger.addFilter(QuietFilter())
        logger.addFilter(RepeatFilter())
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)
    return logger
