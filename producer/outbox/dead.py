"""``job_outbox_dead``: the rows the relay set aside, and what an operator does with them.

A row that can never be sent would otherwise stay at the head of ``job_outbox`` for
good. The relay moves it here, with why and when, in the transaction that deletes
it from ``job_outbox``; the row's own columns come along, so ``retry`` can stage it
again unchanged (the same job id) once the cause is fixed, and ``drop`` forgets it.

While a dead row has an ordering key, the later rows of that key (same queue and
tenant) wait in ``job_outbox`` when the relay runs with ``--on-dead block``. A
``retry`` stages the dead row at the end and moves the rows of its key that waited
behind it, so the key keeps its order; a ``drop`` lets them go on where they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from schemas.codec import EnvelopeCodec

__all__ = ["DeadRow", "Selection", "blocked_keys", "dead_rows", "drop", "move", "retry"]

Key = tuple[str, str, str]  # (queue, tenant id, ordering key)

_MOVE = """
WITH moved AS (
    DELETE FROM job_outbox WHERE id = %s
    RETURNING id, job_id, queue, tenant_id, envelope, staged_at
)
INSERT INTO job_outbox_dead
    (outbox_id, job_id, queue, tenant_id, envelope, staged_at, type, ordering_key, reason, error)
SELECT id, job_id, queue, tenant_id, envelope, staged_at, %s, %s, %s, %s FROM moved
"""
_BLOCKED_KEYS = (
    "SELECT DISTINCT queue, tenant_id, ordering_key FROM job_outbox_dead "
    "WHERE ordering_key IS NOT NULL"
)
COUNT = "SELECT count(*) FROM job_outbox_dead"
# One WHERE for every command: a filter left NULL matches every row.
_WHERE = """
WHERE (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s))
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s)
  AND (%(reason)s::text IS NULL OR reason = %(reason)s)
"""
_COLUMNS = "id, queue, tenant_id, type, ordering_key, reason, error, dead_at, job_id"
_LIST = f"SELECT {_COLUMNS} FROM job_outbox_dead {_WHERE} ORDER BY id LIMIT %(limit)s"
_TAKE = f"SELECT {_COLUMNS}, envelope FROM job_outbox_dead {_WHERE} ORDER BY id FOR UPDATE"
_DELETE = "DELETE FROM job_outbox_dead WHERE id = ANY(%s)"
_STAGE = (
    "INSERT INTO job_outbox (job_id, queue, tenant_id, envelope, staged_at) "
    "VALUES (%s, %s, %s, %s, coalesce(%s::timestamptz, clock_timestamp())) RETURNING id"
)
_BEHIND = (
    "SELECT id, job_id, envelope, staged_at FROM job_outbox "
    "WHERE queue = %s AND tenant_id = %s AND id < %s ORDER BY id FOR UPDATE"
)
_UNSTAGE = "DELETE FROM job_outbox WHERE id = ANY(%s)"
_NOTIFY = "SELECT pg_notify('job_outbox', '')"


@dataclass(frozen=True, kw_only=True)
class DeadRow:
    """One set-aside row as ``producer outbox dead list`` shows it."""

    id: int
    queue: str
    tenant_id: str
    type: str | None
    ordering_key: str | None
    reason: str
    error: str
    dead_at: datetime
    job_id: str


@dataclass(frozen=True, kw_only=True)
class Selection:
    """Which dead rows a command acts on: ``ids`` (None: every row) and filters."""

    ids: Sequence[int] | None = None
    queue: str | None = None
    tenant: str | None = None
    reason: str | None = None

    def params(self) -> dict[str, Any]:
        ids = None if self.ids is None else list(self.ids)
        return {"ids": ids, "queue": self.queue, "tenant": self.tenant, "reason": self.reason}


def move(
    conn: psycopg.Connection[Any],
    row_id: int,
    *,
    job_type: str | None,
    ordering_key: str | None,
    reason: str,
    error: str,
) -> None:
    """Set row ``row_id`` of ``job_outbox`` aside (call inside the relay's transaction)."""
    conn.execute(_MOVE, (row_id, job_type, ordering_key, reason, error))


def blocked_keys(conn: psycopg.Connection[Any]) -> set[Key]:
    """The ordering keys that have a dead row: under ``--on-dead block`` their later
    rows wait."""
    return {(str(q), str(t), str(k)) for q, t, k in conn.execute(_BLOCKED_KEYS).fetchall()}


def dead_rows(conn: psycopg.Connection[Any], selection: Selection, limit: int) -> list[DeadRow]:
    rows = conn.execute(_LIST, {**selection.params(), "limit": limit}).fetchall()
    return [_dead_row(row) for row in rows]


def retry(
    conn: psycopg.Connection[Any], selection: Selection, codec: EnvelopeCodec
) -> list[tuple[DeadRow, int]]:
    """Stage the selected rows again at the end of ``job_outbox`` (same job ids), each
    followed by the rows of its ordering key that waited behind it; returns each
    dead row with its new ``job_outbox`` id. One transaction, then a NOTIFY."""
    done: list[tuple[DeadRow, int]] = []
    with conn.transaction():
        for row in conn.execute(_TAKE, selection.params()).fetchall():
            dead = _dead_row(row[:9])
            new_id = _stage(conn, dead.job_id, dead.queue, dead.tenant_id, bytes(row[9]), None)
            if dead.ordering_key is not None:
                _move_key_behind(conn, dead, new_id, codec)
            done.append((dead, new_id))
        conn.execute(_DELETE, ([dead.id for dead, _ in done],))
        conn.execute(_NOTIFY)
    return done


def drop(conn: psycopg.Connection[Any], selection: Selection) -> list[DeadRow]:
    """Delete the selected rows for good; the rows of their keys go on (NOTIFY)."""
    with conn.transaction():
        taken = [_dead_row(row[:9]) for row in conn.execute(_TAKE, selection.params()).fetchall()]
        conn.execute(_DELETE, ([dead.id for dead in taken],))
        conn.execute(_NOTIFY)
    return taken


def _stage(
    conn: psycopg.Connection[Any],
    job_id: str,
    queue: str,
    tenant: str,
    envelope: bytes,
    staged_at: datetime | None,
) -> int:
    row = conn.execute(_STAGE, (job_id, queue, tenant, envelope, staged_at)).fetchone()
    assert row is not None
    return int(row[0])


def _move_key_behind(
    conn: psycopg.Connection[Any], dead: DeadRow, new_id: int, codec: EnvelopeCodec
) -> None:
    """Re-stage, after ``new_id``, the rows of ``dead``'s ordering key still waiting, in
    their order: a retried job runs before the later jobs of its key."""
    waiting = []
    for row_id, job_id, envelope, staged_at in conn.execute(
        _BEHIND, (dead.queue, dead.tenant_id, new_id)
    ).fetchall():
        try:
            key = codec.decode(bytes(envelope)).ordering_key
        except Exception:  # an undecodable row has no key to keep in line
            continue
        if key == dead.ordering_key:
            waiting.append((int(row_id), str(job_id), bytes(envelope), staged_at))
    if waiting:
        conn.execute(_UNSTAGE, ([row_id for row_id, *_ in waiting],))
        for _, job_id, envelope, staged_at in waiting:
            _stage(conn, job_id, dead.queue, dead.tenant_id, envelope, staged_at)


def _dead_row(row: Sequence[Any]) -> DeadRow:
    row_id, queue, tenant, job_type, key, reason, error, dead_at, job_id = row
    return DeadRow(id=int(row_id), queue=str(queue), tenant_id=str(tenant), type=job_type,
                   ordering_key=key, reason=str(reason), error=str(error), dead_at=dead_at,
                   job_id=str(job_id))  # fmt: skip
