"""Move committed ``job_outbox`` rows to Kafka: ``producer outbox relay``.

One relay is active at a time: it holds a PostgreSQL advisory lock on its
session, and the others wait on standby, trying the lock every poll interval, so
one takes over when the active relay's session ends: a crash closes it, and the
server ends the session of a relay that is stopped or cut off after the lock
timeout (:mod:`producer.outbox.lock`).

The active relay reads rows in staging order (``id``), produces them with the
idempotent ``acks=all`` producer (:meth:`JobProducer.send_job`, the topic choice
and checks of ``enqueue``), waits for the broker's acknowledgements and only then
deletes the rows it acknowledged. A relay killed between produce and delete
leaves the rows; before producing, though, it stored the batch's highest row id
and, per partition of the topics it writes, an offset below every record the
batch may write, fresh for that batch (``job_outbox_relay``,
:mod:`producer.outbox.marks`). The relay that takes over reads those partitions from
there and deletes the rows whose job ids already landed, so it does not send
them again. What is left is at least once (the job id stays the handler's
idempotency key): a relay cut off from PostgreSQL while its produce still
completes.

A row that cannot be sent is that row's failure, never the relay's
(:mod:`producer.outbox.failures`): a retriable one holds back only its (queue,
tenant), with a capped exponential backoff; one that can never be sent is set
aside in ``job_outbox_dead`` (:mod:`producer.outbox.dead`) in the transaction
that deletes it, and the rows behind it go on (:mod:`producer.outbox.batch`).

A trigger's ``NOTIFY job_outbox`` wakes the relay when a staging transaction
commits; the poll interval is the fallback (a lost notification, a restart).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from jobcore.kafka import KafkaException, KafkaSettings
from producer.api import EnqueueError, JobProducer
from producer.outbox.batch import Batcher, BatchOutcome, BatchPlan
from producer.outbox.dead import COUNT as DEAD_COUNT
from producer.outbox.dead import blocked_keys, move
from producer.outbox.failures import OnDead, RowFailures
from producer.outbox.lock import Heartbeat, connect, ping, ping_interval
from producer.outbox.marks import Marks
from producer.outbox.recovery import KafkaPositions
from schemas.codec import EnvelopeCodec, SchemaRegistry

__all__ = ["LOCK_KEY", "BatchOutcome", "OutboxRelay", "OutboxStats", "RelayConfig"]

log = logging.getLogger(__name__)

# The advisory lock that makes one relay active per database ("job_outbox" as a number).
LOCK_KEY = 0x6A6F625F6F7574
CHANNEL = "job_outbox"
_DELETE = "DELETE FROM job_outbox WHERE id = ANY(%s)"
_RELAY_STATE = "SELECT inflight_max_id, marks FROM job_outbox_relay"
_MARK_INFLIGHT = "UPDATE job_outbox_relay SET inflight_max_id = %s, marks = %s::jsonb"
_FINISH_BATCH = "UPDATE job_outbox_relay SET inflight_max_id = NULL, marks = '{}'::jsonb"
_CLEAR_INFLIGHT = "UPDATE job_outbox_relay SET inflight_max_id = NULL"
_INFLIGHT = "SELECT EXISTS (SELECT 1 FROM job_outbox WHERE id <= %s)"
_DELETE_LANDED = "DELETE FROM job_outbox WHERE id <= %s AND job_id = ANY(%s)"
_STATS = (
    "SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(staged_at)), 0), "
    f"({DEAD_COUNT}) FROM job_outbox"
)


@dataclass(frozen=True, kw_only=True)
class RelayConfig:
    dsn: str
    batch: int = 500
    poll_interval_s: float = 1.0
    # A row whose topic is missing waits this long (a queue being created) before
    # it is set aside.
    missing_topic_grace_s: float = 600.0
    on_dead: OnDead = OnDead.BLOCK
    # A retriable failure holds its (queue, tenant) back base * 2^(n-1), at most max.
    backoff_base_s: float = 0.2
    backoff_max_s: float = 30.0
    # The server ends the lock session after this long without a statement, so a
    # stopped or cut-off relay's lock goes; the relay pings at a third of it.
    lock_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")
        if not self.poll_interval_s > 0:
            raise ValueError(f"poll interval must be > 0 seconds, got {self.poll_interval_s}")
        if self.missing_topic_grace_s < 0:
            raise ValueError(
                f"missing topic grace must be >= 0 seconds, got {self.missing_topic_grace_s}"
            )
        if not 0 < self.backoff_base_s <= self.backoff_max_s:
            raise ValueError(
                f"backoff must be 0 < base <= max, got {self.backoff_base_s}, {self.backoff_max_s}"
            )
        if self.lock_timeout_s < 1:
            raise ValueError(
                f"lock timeout must be at least 1 second (--lock-timeout), "
                f"got {self.lock_timeout_s}"
            )


@dataclass(frozen=True, kw_only=True)
class OutboxStats:
    """What an operator watches: rows waiting and how old the oldest is (the lag)."""

    active: bool
    waiting: int
    lag_s: float
    relayed: int
    dead: int = 0  # rows set aside in job_outbox_dead


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
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._producer = producer
        self._settings = settings
        self._monotonic = monotonic
        self._failures = RowFailures(
            grace_s=config.missing_topic_grace_s,
            backoff_base_s=config.backoff_base_s,
            backoff_max_s=config.backoff_max_s,
        )
        self._batcher = Batcher(
            producer=producer,
            codec=EnvelopeCodec(registry if registry is not None else SchemaRegistry()),
            failures=self._failures,
            batch=config.batch,
            on_dead=config.on_dead,
        )
        self._ping_s = ping_interval(config.lock_timeout_s)
        self.active = threading.Event()
        self.relayed = 0
        self.recovered = 0
        self.set_aside = 0  # rows this relay moved to job_outbox_dead

    def run(self, stop: threading.Event) -> None:
        """Wait for the lock, then relay until ``stop``; a lost database connection
        drops the lock and the relay starts over (on standby if another took it)."""
        while not stop.is_set():
            try:
                with connect(self._config.dsn, self._config.lock_timeout_s) as conn:
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
            dead=int(row[2]),
        )

    def recover(self, conn: psycopg.Connection[Any], positions: KafkaPositions) -> int:
        """After taking the lock: delete the rows of an interrupted batch whose records
        already landed, so they are not sent twice; returns how many."""
        row = conn.execute(_RELAY_STATE).fetchone()
        assert row is not None, "job_outbox_relay is empty: run producer outbox init"
        inflight, marks = row[0], Marks.from_json(row[1])
        if inflight is None:
            return 0
        pending = conn.execute(_INFLIGHT, (inflight,)).fetchone()
        found: set[str] = set()
        if pending and pending[0]:
            with Heartbeat(conn, self._ping_s):
                found = positions.landed(marks)
        with conn.transaction():
            done = conn.execute(_DELETE_LANDED, (inflight, list(found))).rowcount
            conn.execute(_CLEAR_INFLIGHT)
        if done:
            log.warning("outbox relay: %d rows of an interrupted batch had landed", done)
        self.recovered += done
        return done

    def relay_batch(self, conn: psycopg.Connection[Any], positions: KafkaPositions) -> int:
        """One pass: send up to one batch of rows, delete those the broker acknowledged
        and set aside those that can never be sent; returns how many rows it handled
        (sent or set aside). A row that failed retriably stays, and its tenant backs
        off; no row's failure raises."""
        now = self._monotonic()
        blocked = blocked_keys(conn) if self._config.on_dead is OnDead.BLOCK else set()
        plan = self._batcher.plan(conn, now, blocked)
        if not plan.size:
            return 0
        marks = self._marks(conn, plan, positions, now)
        if plan.sends:
            inflight = max(s.row_id for s in plan.sends)
            conn.execute(_MARK_INFLIGHT, (inflight, marks.to_json()))
        with Heartbeat(conn, self._ping_s):
            outcome = self._batcher.send(plan, now)
        self._finish(conn, outcome)
        return plan.size

    def _marks(
        self, conn: psycopg.Connection[Any], plan: BatchPlan, positions: KafkaPositions, now: float
    ) -> Marks:
        """Fresh marks for this batch's topics only, so recovery reads no more than
        what was written while the batch was in flight. A topic whose ends cannot be
        read fails its rows, not the batch ("Rows that cannot be sent")."""
        marks = Marks()
        with Heartbeat(conn, self._ping_s):
            for topic in sorted({s.topic for s in plan.sends}):
                try:
                    marks = marks.with_topic(topic, positions.ends(topic))
                except (EnqueueError, KafkaException) as exc:
                    self._batcher.withhold(plan, topic, exc, now)
            for queue in sorted({s.job.queue for s in plan.sends}):
                # A flood's rows may go to the queue's overflow lane (the producer's
                # diversion, as for enqueue) only once that topic is marked too.
                overflow = self._producer.diversion_topic(queue)
                if overflow is None:
                    continue
                try:
                    marks = marks.with_topic(overflow, positions.ends(overflow))
                except (EnqueueError, KafkaException) as exc:
                    log.warning("%s: %s; this batch diverts no flood of %s", overflow, exc, queue)
                    continue
                plan.diverting.add(queue)
        return marks

    def _finish(self, conn: psycopg.Connection[Any], outcome: BatchOutcome) -> None:
        """Delete the acknowledged rows, set aside the dead ones and clear the
        in-flight mark, in one transaction."""
        with conn.transaction():
            if outcome.delivered:
                conn.execute(_DELETE, (list(outcome.delivered),))
            for row in outcome.dead:
                move(conn, row.row_id, job_type=row.job_type, ordering_key=row.ordering_key,
                     reason=row.reason, error=row.error)  # fmt: skip
            conn.execute(_FINISH_BATCH)
        self.relayed += len(outcome.delivered)
        self.set_aside += len(outcome.dead)

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
            # The attempt is the standby's ping too: never longer apart than that.
            stop.wait(min(self._config.poll_interval_s, self._ping_s))
        return False

    def _serve(self, conn: psycopg.Connection[Any], stop: threading.Event) -> None:
        """Recover once, then relay batches. Nothing but a lost database connection
        ends this (then :meth:`run` connects again): a Kafka problem, or anything
        unexpected, backs off a poll interval and tries again, the rows kept."""
        conn.execute("LISTEN job_outbox")
        positions = KafkaPositions(self._settings)
        recovered = False
        try:
            while not stop.is_set():
                try:
                    if not recovered:
                        self.recover(conn, positions)
                        recovered = True
                    full = self.relay_batch(conn, positions) >= self._config.batch
                except psycopg.OperationalError:
                    raise
                except (EnqueueError, KafkaException, TimeoutError) as exc:
                    log.error("outbox relay: %s; trying again", exc)
                    self._pause(conn, stop)
                    continue
                except Exception:
                    log.exception("outbox relay: unexpected error; trying again")
                    self._pause(conn, stop)
                    continue
                if not full:
                    self._wait(conn)
        finally:
            positions.close()

    def _pause(self, conn: psycopg.Connection[Any], stop: threading.Event) -> None:
        """A poll interval after an error, the lock kept meanwhile."""
        with Heartbeat(conn, self._ping_s):
            stop.wait(self._config.poll_interval_s)

    def _wait(self, conn: psycopg.Connection[Any]) -> None:
        """Until a staging transaction commits, a tenant's backoff ends, the poll
        interval passes, or the lock session is due a ping (then it gets one)."""
        timeout = min(self._config.poll_interval_s, self._ping_s)
        due = self._failures.next_due_s(self._monotonic())
        if due is not None:
            timeout = max(0.001, min(timeout, due))
        for _ in conn.notifies(timeout=timeout, stop_after=1):
            pass
        ping(conn)
