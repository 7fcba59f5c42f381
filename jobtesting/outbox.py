"""The transactional outbox in eager mode: staged jobs run when the transaction commits.

``producer.outbox.Outbox.stage(conn, request)`` writes the job into ``job_outbox``
in the caller's PostgreSQL transaction, and the relay sends it once committed: a
transaction that rolls back leaves no job. :class:`EagerOutbox` keeps that promise
without PostgreSQL or Kafka: it builds and validates each job exactly as staging
does (the same ``PayloadError`` and ``ValueError``, and the record size check),
then hands running it to the framework's commit hook (Django's
``transaction.on_commit``), which drops the callback on a rollback. The connection
is not used: a test's database need not be PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from jobcore.priority import PriorityClasses
from producer.request import JobRequest
from schemas.codec import SchemaRegistry

if TYPE_CHECKING:
    from jobtesting.eager_mode import EagerTransport
    from producer.outbox.staging import StagedJob

__all__ = ["EagerOutbox"]


class EagerOutbox:
    """``Outbox.stage`` and ``stage_many``, run at commit by ``transport``."""

    def __init__(
        self,
        transport: EagerTransport,
        registry: SchemaRegistry,
        classes: PriorityClasses | None,
        on_commit: Callable[[Callable[[], None]], None],
    ) -> None:
        # Imported here: staging needs psycopg (the ``outbox`` extra), as the real one does.
        from producer.outbox.staging import Outbox

        self._outbox = Outbox(registry=registry, classes=classes)
        self._transport = transport
        self._on_commit = on_commit

    def stage(self, conn: object, request: JobRequest) -> str:
        """Validate one job now and run it when the transaction commits; its id."""
        return self.stage_many(conn, [request])[0]

    def stage_many(self, conn: object, requests: Iterable[JobRequest]) -> list[str]:
        """Validate every job now (one bad request stages none) and run them, in
        order, when the transaction commits; their ids."""
        staged = self._outbox.build(requests)
        self._on_commit(lambda: self._run(staged))
        return [s.job.job_id for s in staged]

    def _run(self, staged: list[StagedJob]) -> None:
        for one in staged:
            self._transport.send(one.job, self._transport.destination(one.job))
