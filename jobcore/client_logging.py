"""Where librdkafka's own log lines go, and how their repeats are kept quiet."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["RepeatFilter", "client_logger"]


class RepeatFilter(logging.Filter):
    """Drops a log line that repeats one seen within ``window_s``: a client whose
    broker is down says "Connect ... failed" a few times a second, and one line per
    window tells a person as much. Digits are ignored when comparing, since counts
    and durations change between otherwise identical lines."""

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


def client_logger() -> logging.Logger:
    """The logger librdkafka's own lines go to (the client's ``logger`` setting), so
    they are never printed raw as ``%3|...`` on the terminal: WARNING and up by
    default, each repeat once per window."""
    logger = logging.getLogger("librdkafka")
    if not any(isinstance(f, RepeatFilter) for f in logger.filters):
        logger.addFilter(RepeatFilter())
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)
    return logger
