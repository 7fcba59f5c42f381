"""Each outbox relay (active or standby) reports its backlog to ``jobs._outbox_relays``.

The dashboard reads that topic and so shows the rows waiting and the relay lag of
every relay without a connection to any database. The figures come from
:meth:`OutboxRelay.stats` on a connection of the reporter's own: the relay thread
owns its connection, and a stuck relay must not stop its own report.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

import psycopg
from psycopg.conninfo import conninfo_to_dict

from jobcore.kafka import KafkaSettings
from jobcore.live_topic import LivePublisher, LiveTopic
from jobcore.plain import plain_dict
from jobcore.relay_report import RelayReport
from jobcore.topic_admin import ensure_outbox_relays_topic
from producer.outbox.relay import OutboxStats

__all__ = ["Relay", "RelayReporter", "database_of", "report_publisher"]

log = logging.getLogger(__name__)


class Relay(Protocol):
    """What the report reads of an :class:`OutboxRelay`."""

    active: threading.Event
    relayed: int

    def stats(self, conn: psycopg.Connection[Any]) -> OutboxStats: ...


def database_of(dsn: str) -> str:
    """host:port/dbname of ``dsn``, never its password."""
    parts = conninfo_to_dict(dsn)
    return f"{parts.get('host', 'localhost')}:{parts.get('port', 5432)}/{parts.get('dbname', '')}"


def _reason(exc: psycopg.Error) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class RelayReporter:
    """Builds the relay's report, reading the table on a connection it keeps (and
    opens again after an error). Used from one thread: the publisher's."""

    def __init__(self, relay: Relay, dsn: str, instance: str) -> None:
        self._relay = relay
        self._dsn = dsn
        self._instance = instance
        self._database = database_of(dsn)
        self._conn: psycopg.Connection[Any] | None = None

    def record(self, now_ms: int) -> dict[str, object]:
        """The report as published; a database error becomes its ``error``."""
        try:
            stats = self._relay.stats(self._connection())
        except psycopg.Error as exc:
            self.close()
            log.debug("outbox relay report: cannot read %s: %s", self._database, exc)
            return plain_dict(self._report(now_ms, error=_reason(exc)))
        return plain_dict(self._report(now_ms, waiting=stats.waiting, lag_s=stats.lag_s))

    def _report(
        self,
        now_ms: int,
        *,
        waiting: int | None = None,
        lag_s: float | None = None,
        error: str | None = None,
    ) -> RelayReport:
        return RelayReport(
            instance=self._instance,
            database=self._database,
            published_at_ms=now_ms,
            active=self._relay.active.is_set(),
            relayed=self._relay.relayed,
            waiting=waiting,
            lag_s=lag_s,
            error=error,
        )

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=5)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def report_publisher(
    reporter: RelayReporter,
    kafka: KafkaSettings,
    *,
    prefix: str,
    instance: str,
    interval_s: float,
) -> LivePublisher:
    """The thread that publishes ``reporter``'s record every ``interval_s``."""
    topic = LiveTopic(
        kafka=kafka,
        ensure=lambda: ensure_outbox_relays_topic(kafka, prefix),
        instance=instance,
        interval_s=interval_s,
        what="the outbox relay report",
    )
    return LivePublisher(topic, reporter.record, name="outbox-report", on_stop=reporter.close)
