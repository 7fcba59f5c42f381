"""The relay's lock session: the PostgreSQL connection that holds the advisory lock.

The lock lives as long as the server keeps the session. A relay process that dies
closes its socket and the lock goes at once; a relay that is stopped (SIGSTOP, a
paused VM) or whose host or network goes silent closes nothing, and the server
would keep the session until TCP keepalive gives up (about two hours by default).
Client keepalives do not help against a stopped process: its kernel still answers
them. So the session asks the server to end it after ``lock_timeout_s`` without a
statement (``idle_session_timeout``, PostgreSQL 14+, and
``idle_in_transaction_session_timeout``), and the relay runs one at least every
third of that (:func:`ping`, and :class:`Heartbeat` while it waits on Kafka). A
standby then takes the lock within the lock timeout plus its poll interval.

TCP keepalives and ``tcp_user_timeout`` cover the other side: a relay whose server
went silent learns it within about the lock timeout instead of hanging in a read.
"""

from __future__ import annotations

import logging
import math
import threading
from types import TracebackType
from typing import Any

import psycopg

__all__ = ["Heartbeat", "connect", "ping", "ping_interval"]

log = logging.getLogger(__name__)

_TIMEOUTS = ("idle_in_transaction_session_timeout", "idle_session_timeout")


def ping_interval(lock_timeout_s: float) -> float:
    """How often the session must run a statement to be kept: well inside the timeout."""
    return lock_timeout_s / 3


def connect(dsn: str, lock_timeout_s: float) -> psycopg.Connection[Any]:
    """An autocommit session the server ends after ``lock_timeout_s`` of silence."""
    probe = max(1, math.ceil(ping_interval(lock_timeout_s)))
    conn = psycopg.connect(
        dsn,
        autocommit=True,
        connect_timeout=max(2, math.ceil(lock_timeout_s)),
        keepalives=1,
        keepalives_idle=probe,
        keepalives_interval=probe,
        keepalives_count=3,
        tcp_user_timeout=int(lock_timeout_s * 1000),
    )
    timeout_ms = max(1, int(lock_timeout_s * 1000))
    for setting in _TIMEOUTS:
        try:
            conn.execute(f"SET {setting} = {timeout_ms}")
        except psycopg.errors.UndefinedObject:
            log.warning(
                "outbox relay: this PostgreSQL has no %s (it needs 14 or later): a relay "
                "that is stopped or cut off keeps the lock until TCP keepalive ends its "
                "session (the server's tcp_keepalives_*)",
                setting,
            )
    return conn


def ping(conn: psycopg.Connection[Any]) -> None:
    """A statement, so the server keeps the session (and its lock)."""
    conn.execute("SELECT 1")


class Heartbeat:
    """Pings ``conn`` from a thread while the relay waits on Kafka without using it
    (a batch's acknowledgements, recovery's reads), so a slow broker does not cost
    the lock. The relay's own thread must not use ``conn`` meanwhile."""

    def __init__(self, conn: psycopg.Connection[Any], interval_s: float) -> None:
        self._conn = conn
        self._interval_s = interval_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="outbox-lock-ping", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._done.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._done.wait(self._interval_s):
            try:
                ping(self._conn)
            except psycopg.Error as exc:
                # The relay's next statement on the session fails the same way.
                log.warning("outbox relay: the lock session is gone (%s)", exc)
                return
