"""Which ``job_outbox`` rows one relay pass sends, and sending them (one failure policy).

A pass reads rows in staging order (``id``), skipping:

- the rows of a (queue, tenant) that backs off after a retriable failure (not even
  read: the query leaves them out, so a tenant's long backlog never hides the
  others);
- under ``--on-dead block``, the rows of an ordering key that has a dead row (read
  and passed over: the key lives in the envelope; pages follow until the batch is
  full, so any number of them never stalls the rows behind);
- once a tenant's backoff is over, every row of it but the one that failed: that
  row goes alone, and the others follow once it landed.

It decodes each row and checks its destination; a row that fails there is judged
at once (:mod:`producer.outbox.failures`). The rest are produced in waves: all
rows at once, except that a second row of one ordering key waits for the wave
after its predecessor's acknowledgement, so that a key's row that fails never has
a later row of its key land before it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_all
from dataclasses import dataclass, field
from typing import Any

import psycopg

from producer.api import Delivered, JobProducer
from producer.outbox.dead import Key
from producer.outbox.failures import DeadReason, OnDead, RowFailures, Tenant, classify
from schemas.codec import EnvelopeCodec
from schemas.job import Job

__all__ = ["BatchOutcome", "BatchPlan", "Batcher", "Dead", "Send"]

log = logging.getLogger(__name__)

_PAGE = """
SELECT id, queue, tenant_id, envelope FROM job_outbox
WHERE id > %s AND (queue, tenant_id) NOT IN (SELECT * FROM unnest(%s::text[], %s::text[]))
ORDER BY id LIMIT %s
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class Send:
    row_id: int
    job: Job
    topic: str
    tenant: Tenant
    key: Key | None  # (queue, tenant, ordering key) of an ordered job


@dataclass(frozen=True, slots=True, kw_only=True)
class Dead:
    """A row to set aside, with what ``job_outbox_dead`` shows of it."""

    row_id: int
    tenant: Tenant
    reason: DeadReason
    error: str
    job_type: str | None = None
    ordering_key: str | None = None


@dataclass(kw_only=True)
class BatchPlan:
    sends: list[Send] = field(default_factory=list)  # in staging order
    dead: list[Dead] = field(default_factory=list)
    # The queues whose overflow lane the relay marked for this batch: only their floods
    # may be diverted (recovery after a crash reads the marked topics alone).
    diverting: set[str] = field(default_factory=set)

    @property
    def size(self) -> int:
        return len(self.sends) + len(self.dead)


@dataclass(frozen=True, kw_only=True)
class BatchOutcome:
    delivered: dict[int, Delivered]  # row id -> where its record landed
    dead: list[Dead] = field(default_factory=list)


class Batcher:
    """Plans and sends one pass's rows; ``failures`` is the relay's memory of them."""

    def __init__(
        self,
        *,
        producer: JobProducer,
        codec: EnvelopeCodec,
        failures: RowFailures,
        batch: int,
        on_dead: OnDead,
    ) -> None:
        self._producer = producer
        self._codec = codec
        self._failures = failures
        self._batch = batch
        self._on_dead = on_dead

    def plan(self, conn: psycopg.Connection[Any], now: float, blocked: set[Key]) -> BatchPlan:
        """Up to ``batch`` rows to send or set aside; ``blocked`` grows with the keys
        of rows set aside here (under ``block``)."""
        plan = BatchPlan()
        held = set(self._failures.waiting(now))
        queues, tenants = [q for q, _ in held], [t for _, t in held]
        after = 0
        while plan.size < self._batch:
            rows = conn.execute(_PAGE, (after, queues, tenants, self._batch)).fetchall()
            for row_id, queue, tenant_id, envelope in rows:
                after = row_id
                tenant = (str(queue), str(tenant_id))
                if tenant not in held:
                    self._plan_row(plan, int(row_id), tenant, bytes(envelope), now, blocked, held)
                    if self._failures.failing(tenant):
                        held.add(tenant)  # its failed row goes alone
                if plan.size >= self._batch:
                    break
            if len(rows) < self._batch:
                break
        return plan

    def _plan_row(
        self,
        plan: BatchPlan,
        row_id: int,
        tenant: Tenant,
        envelope: bytes,
        now: float,
        blocked: set[Key],
        held: set[Tenant],
    ) -> None:
        try:
            job = self._codec.decode(envelope)
        except Exception as exc:  # whatever the bytes, it is this row's
            error = str(exc) or type(exc).__name__
            log.error("outbox relay: row %d (queue %s, tenant %s) set aside in job_outbox_dead "
                      "(%s): %s", row_id, *tenant, DeadReason.UNDECODABLE, error)  # fmt: skip
            plan.dead.append(Dead(row_id=row_id, tenant=tenant, reason=DeadReason.UNDECODABLE,
                                  error=error))  # fmt: skip
            return
        key = None if job.ordering_key is None else (*tenant, job.ordering_key)
        if key is not None and key in blocked:
            return
        try:
            topic = self._producer.destination_of(job)
        except Exception as exc:  # a row's failure, never the relay's
            dead = self._judge(row_id, job, tenant, exc, job.queue, now)
            if dead is None:
                held.add(tenant)
            else:
                plan.dead.append(dead)
                if key is not None and self._on_dead is OnDead.BLOCK:
                    blocked.add(key)
            return
        plan.sends.append(Send(row_id=row_id, job=job, topic=topic, tenant=tenant, key=key))

    def send(self, plan: BatchPlan, now: float) -> BatchOutcome:
        """Produce the plan's rows in waves (see the module's docstring) and wait."""
        delivered: dict[int, Delivered] = {}
        dead = list(plan.dead)
        failed: set[Tenant] = set()  # back off: their later rows wait for another pass
        stopped: set[Key] = set()  # a dead row under block: the key's later rows wait
        pending = plan.sends
        while pending:
            wave, pending = _wave(s for s in pending if s.tenant not in failed
                                  and (s.key is None or s.key not in stopped))  # fmt: skip
            for send, result in self._produce(wave, plan.diverting):
                if isinstance(result, Delivered):
                    delivered[send.row_id] = result
                    self._failures.delivered(send.tenant, send.topic)
                    continue
                verdict = self._judge(send.row_id, send.job, send.tenant, result, send.topic, now)
                if verdict is None:
                    failed.add(send.tenant)
                else:
                    dead.append(verdict)
                    if send.key is not None and self._on_dead is OnDead.BLOCK:
                        stopped.add(send.key)
        return BatchOutcome(delivered=delivered, dead=dead)

    def _produce(
        self, wave: Sequence[Send], diverting: set[str]
    ) -> list[tuple[Send, Delivered | BaseException]]:
        futures: list[tuple[Send, Future[Delivered] | BaseException]] = []
        for send in wave:
            try:
                divert = send.job.queue in diverting
                futures.append((send, self._producer.send_job(send.job, divert=divert)))
            except Exception as exc:  # refused at once: this row's failure
                futures.append((send, exc))
        wait_all([f for _, f in futures if isinstance(f, Future)])
        results: list[tuple[Send, Delivered | BaseException]] = []
        for send, future in futures:
            if isinstance(future, BaseException):
                results.append((send, future))
            else:
                error = future.exception()
                results.append((send, future.result() if error is None else error))
        return results

    def withhold(self, plan: BatchPlan, topic: str, exc: BaseException, now: float) -> None:
        """Take the rows to ``topic`` out of ``plan``, judged as if their produce had
        failed with ``exc`` (the relay could not read the topic's partition ends for
        the crash marks): that is those rows' failure, never the relay's. A tenant
        that backs off keeps its later rows too, as after a failed produce."""
        failed: set[Tenant] = set()
        stopped: set[Key] = set()
        kept: list[Send] = []
        for send in plan.sends:
            if send.tenant in failed or (send.key is not None and send.key in stopped):
                continue
            if send.topic != topic:
                kept.append(send)
                continue
            dead = self._judge(send.row_id, send.job, send.tenant, exc, topic, now)
            if dead is None:
                failed.add(send.tenant)
            else:
                plan.dead.append(dead)
                if send.key is not None and self._on_dead is OnDead.BLOCK:
                    stopped.add(send.key)
        plan.sends = kept

    def _judge(
        self, row_id: int, job: Job, tenant: Tenant, exc: BaseException, topic: str, now: float
    ) -> Dead | None:
        """The row set aside, or None when its tenant backs off (logged either way)."""
        verdict = classify(exc, topic=topic)
        reason = self._failures.judge(verdict, tenant, now)
        if reason is None:
            log.warning("outbox relay: row %d (job %s, queue %s, tenant %s) not relayed: %s; "
                        "its tenant waits %.1fs", row_id, job.job_id, job.queue, job.tenant_id,
                        verdict.error, self._failures.backoff_s(tenant, now))  # fmt: skip
            return None
        self._failures.set_aside(tenant)
        log.error("outbox relay: row %d (job %s, queue %s, tenant %s) set aside in "
                  "job_outbox_dead (%s): %s", row_id, job.job_id, job.queue, job.tenant_id,
                  reason, verdict.error)  # fmt: skip
        return Dead(row_id=row_id, tenant=tenant, reason=reason, error=verdict.error,
                    job_type=job.type, ordering_key=job.ordering_key)  # fmt: skip


def _wave(candidates: Iterable[Send]) -> tuple[list[Send], list[Send]]:
    """The rows to produce now (at most one per ordering key) and those for later."""
    wave: list[Send] = []
    later: list[Send] = []
    keys: set[Key] = set()
    for send in candidates:
        if send.key is not None and send.key in keys:
            later.append(send)
            continue
        if send.key is not None:
            keys.add(send.key)
        wave.append(send)
    return wave, later
