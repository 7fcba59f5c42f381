"""Move committed ``job_outbox`` rows to Kafka: ``producer outbox relay``.

One relay is active at a time: it holds a PostgreSQL advisory lock on its
session, and the others wait on standby, trying the lock every poll interval, so
one takes over when the active relay's session ends (a crash closes it).

The active relay reads rows in staging order (``id``), produces them with the
idempotent ``acks=all`` producer (:meth:`JobProducer.send_job`, the topic choice
and checks of ``enqueue``), waits for the broker's acknowledgements and only then
deletes the rows it acknowledged. A relay killed between produce and delete
leaves the rows; before producing, though, it stored the batch's highest row id
and, per partition, an offset below every record the batch may write
(``job_outbox_relay``). The relay that takes over reads those partitions from
there and deletes the rows whose job ids already landed, so it does not send
them again. What is left is at least once (the job id stays the handler's
idempotency key): a relay cut off from PostgreSQL while its produce still
completes.

A trigger's ``NOTIFY job_outbox`` wakes the relay when a staging transaction
commits; the poll interval is the fallback (a lost notification, a restart).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import wait as wait_all
from dataclasses import dataclass
from typing import Any

import psycopg

from jobcore.kafka import KafkaException, KafkaSettings
from producer.api import Delivered, EnqueueError, JobProducer
from producer.outbox.marks import Marks
from producer.outbox.recovery import KafkaPositions
from schemas.codec import DecodeError, EnvelopeCodec, SchemaRegistry
from schemas.job import Job

__all__ = ["LOCK_KEY", "OutboxRelay", "OutboxStats", "RelayConfig"]

log = logging.getLogger(__name__)

# The advisory lock that makes one relay active per database ("job_outbox" as a number).
LOCK_KEY = 0x6A6F625F6F7574
CHANNEL = "job_outbox"
_SELECT = "SELECT id, envelope FROM job_outbox ORDER BY id LIMIT %s"
_DELETE = "DELETE FROM job_outbox WHERE id = ANY(%s)"
_RELAY_STATE = "SELECT inflight_max_id, marks FROM job_outbox_relay"
_MARK_INFLIGHT = "UPDATE job_outbox_relay SET inflight_max_id = %s, marks = %s::jsonb"
_FINISH_BATCH = "UPDATE job_outbox_relay SET inflight_max_id = NULL, marks = %s::jsonb"
_CLEAR_INFLIGHT = "UPDATE job_outbox_relay SET inflight_max_id = NULL"
_INFLIGHT = "SELECT EXISTS (SELECT 1 FROM job_outbox WHERE id <= %s)"
_DELETE_LANDED = "DELETE FROM job_outbox WHERE id <= %s AND job_id = ANY(%s)"
_STATS = (
    "SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(staged_at)), 0) "
    "FROM job_outbox"
)


@dataclass(frozen=True, kw_only=True)
class RelayConfig:
    dsn: str
    batch: int = 500
    poll_interval_s: float = 1.0

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")
        if not self.poll_interval_s > 0:
            raise ValueError(f"poll interval must be > 0 seconds, got {self.poll_interval_s}")


@dataclass(frozen=True, kw_only=True)
class OutboxStats:
    """What an operator watches: rows waiting and how old the oldest is (the lag)."""

    active: bool
    waiting: int
    lag_s: float
    relayed: int


@dataclass(frozen=True, kw_only=True)
class BatchPlan:
    sends: list[tuple[int, Job, str]]  # (row id, job, topic), in staging order
    failures: dict[int, str]


@dataclass(frozen=True, kw_only=True)
class BatchOutcome:
    delivered: dict[int, Delivered]  # row id -> where its record landed
    failures: dict[int, str]


class OutboxRelay:
    """Relays ``job_outbox`` rows through ``producer``; :meth:`run` until ``stop`` is set.

    ``settings`` are the producer's Kafka settings: the relay reads partition ends
    and, after a crash, the records its last batch may have written.
    """

    def __init__(
        self,
        config: RelayConfig,
        producer: JobProducer,
        settings: KafkaSettings,
        *,
        registry: SchemaRegistry | None = None,
    ) -> None:
        self._config = config
        self._producer = producer
        self._settings = settings
        self._codec = EnvelopeCodec(registry if registry is not None else SchemaRegistry())
        self._marks = Marks()
        self.active = threading.Event()
        self.relayed = 0
        self.recovered = 0

    def run(self, stop: threading.Event) -> None:
        """Wait for the lock, then relay until ``stop``; a lost database connection
        drops the lock and the relay starts over (on standby if another took it)."""
        while not stop.is_set():
            try:
                with psycopg.connect(self._config.dsn, autocommit=True) as conn:
                    if self._lead(conn, stop):
                        self._serve(conn, stop)
            except psycopg.OperationalError as exc:
                log.warning("outbox relay: database connection lost (%s); reconnecting", exc)
                stop.wait(self._config.poll_interval_s)
            finally:
                self.active.clear()

    def stats(self, conn: psycopg.Connection[Any]) -> OutboxStats:
        row = conn.execute(_STATS).fetchone()
        assert row is not None
        return OutboxStats(
            active=self.active.is_set(),
            waiting=int(row[0]),
            lag_s=float(row[1]),
            relayed=self.relayed,
        )

    def recover(self, conn: psycopg.Connection[Any], positions: KafkaPositions) -> int:
        """After taking the lock: delete the rows of an interrupted batch whose records
        already landed, so they are not sent twice; returns how many."""
        row = conn.execute(_RELAY_STATE).fetchone()
        assert row is not None, "job_outbox_relay is empty: run producer outbox init"
        inflight, self._marks = row[0], Marks.from_json(row[1])
        if inflight is None:
            return 0
        pending = conn.execute(_INFLIGHT, (inflight,)).fetchone()
        found = positions.landed(self._marks) if pending and pending[0] else set()
        with conn.transaction():
            done = conn.execute(_DELETE_LANDED, (inflight, list(found))).rowcount
            conn.execute(_CLEAR_INFLIGHT)
        if done:
            log.warning("outbox relay: %d rows of an interrupted batch had landed", done)
        self.recovered += done
        return done

    def relay_batch(self, conn: psycopg.Connection[Any], positions: KafkaPositions) -> int:
        """Send up to one batch of rows and delete those the broker acknowledged;
        returns how many rows were read. Raises EnqueueError when some were not
        delivered (they stay, and are sent again on the next pass)."""
        rows = conn.execute(_SELECT, (self._config.batch,)).fetchall()
        if not rows:
            return 0
        plan = self._plan(rows)
        for topic in sorted({topic for _, _, topic in plan.sends} - set(self._marks.positions)):
            self._marks = self._marks.with_topic(topic, positions.ends(topic))
        conn.execute(_MARK_INFLIGHT, (max(r[0] for r in rows), self._marks.to_json()))
        outcome = self._send(plan)
        self._finish(conn, outcome)
        if outcome.failures:
            row_id, reason = next(iter(outcome.failures.items()))
            raise EnqueueError(
                f"{len(outcome.failures)} of {len(rows)} outbox rows were not relayed "
                f"(first: row {row_id}: {reason}); they stay in job_outbox"
            )
        return len(rows)

    def _finish(self, conn: psycopg.Connection[Any], outcome: BatchOutcome) -> None:
        """Delete the acknowledged rows and move the marks past them, in one transaction."""
        self._marks = self._marks.advance(outcome.delivered.values())
        with conn.transaction():
            if outcome.delivered:
                conn.execute(_DELETE, (list(outcome.delivered),))
            conn.execute(_FINISH_BATCH, (self._marks.to_json(),))
        self.relayed += len(outcome.delivered)

    def _lead(self, conn: psycopg.Connection[Any], stop: threading.Event) -> bool:
        """Take the advisory lock, waiting on standby until it is free or ``stop``."""
        announced = False
        while not stop.is_set():
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()
            if row is not None and row[0]:
                log.info("outbox relay: active")
                self.active.set()
                return True
            if not announced:
                log.info("outbox relay: standby (another relay holds the lock)")
                announced = True
            stop.wait(self._config.poll_interval_s)
        return False

    def _serve(self, conn: psycopg.Connection[Any], stop: threading.Event) -> None:
        """Recover once, then relay batches; a Kafka problem backs off and tries again
        (rows are kept), it never ends the relay."""
        conn.execute("LISTEN job_outbox")
        positions = KafkaPositions(self._settings)
        recovered = False
        try:
            while not stop.is_set():
                try:
                    if not recovered:
                        self.recover(conn, positions)
                        recovered = True
                    full = self.relay_batch(conn, positions) == self._config.batch
                except (EnqueueError, KafkaException, TimeoutError) as exc:
                    log.error("outbox relay: %s; trying again", exc)
                    stop.wait(self._config.poll_interval_s)
                    continue
                if not full:
                    self._wait(conn)
        finally:
            positions.close()

    def _wait(self, conn: psycopg.Connection[Any]) -> None:
        """Until a staging transaction commits, or the poll interval passes."""
        for _ in conn.notifies(timeout=self._config.poll_interval_s, stop_after=1):
            pass

    def _plan(self, rows: Sequence[tuple[Any, ...]]) -> BatchPlan:
        """Each row's job and topic; a row that cannot be sent is a failure, not a stop."""
        sends: list[tuple[int, Job, str]] = []
        failures: dict[int, str] = {}
        for row_id, envelope in rows:
            try:
                job = self._codec.decode(bytes(envelope))
                sends.append((row_id, job, self._producer.destination_of(job)))
            except (DecodeError, EnqueueError) as exc:
                failures[row_id] = str(exc)
        return BatchPlan(sends=sends, failures=failures)

    def _send(self, plan: BatchPlan) -> BatchOutcome:
        """Produce in staging order (a tenant's partition keeps it) and wait for all."""
        futures = {row_id: self._producer.send_job(job) for row_id, job, _ in plan.sends}
        wait_all(futures.values())
        failures = dict(plan.failures)
        delivered: dict[int, Delivered] = {}
        for row_id, future in futures.items():
            error = future.exception()
            if error is None:
                delivered[row_id] = future.result()
            else:
                failures[row_id] = str(error)
        return BatchOutcome(delivered=delivered, failures=failures)
