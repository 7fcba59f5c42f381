"""The noisy scenario's flood written through the transactional outbox: rows staged in
PostgreSQL, moved to Kafka by an ``OutboxRelay`` whose producer never diverts
(``JOBS_FLOOD_BURST=0``). The relay writes a flood into its tenant's ready partition,
as another language's producer or a backfill tool would; the leasekeeper must read
past it.

PostgreSQL is the private server of the peer benchmarks (Debian's package), started
on the first flood and stopped by ``close``; without it the row says why.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from benchmarks.apps import JOB_TYPE
from benchmarks.context import BenchContext
from benchmarks.procs import Pinning
from producer import FloodPolicy, JobProducer, JobRequest

RELAY_LABEL = "flood through the outbox relay (JOBS_FLOOD_BURST=0)"
FLOOD_TENANT = "big-backfill"
STAGE_CHUNK = 1_000


class RelayUnavailable(RuntimeError):
    """PostgreSQL (or the outbox's driver) could not be had on this machine."""


def flood_request(queue: str, n: int) -> JobRequest:
    """The flood's ``n``-th job (its group, 0, travels in the payload's ``n``)."""
    return JobRequest(queue=queue, type=JOB_TYPE, payload={"n": n}, tenant_id=FLOOD_TENANT)


class OutboxWriter:
    def __init__(self) -> None:
        self._server: Any = None

    def _dsn(self) -> str:
        if self._server is None:
            try:
                from benchmarks.peers.servers import PostgresServer
                from producer.outbox import init_schema

                self._server = PostgresServer(Pinning(servers=None, clients=None),
                                              allow_install=True).start()  # fmt: skip
                init_schema(self._server.dsn)
            except Exception as exc:  # any reason: the row says it, the others run
                raise RelayUnavailable(f"no PostgreSQL for the outbox ({exc})") from exc
        return str(self._server.dsn)

    def write(self, ctx: BenchContext, loader: Any, count: int) -> None:
        """Stage ``count`` flood jobs in one transaction, then relay them all."""
        import psycopg

        from producer.outbox import Outbox, OutboxRelay, RelayConfig

        dsn = self._dsn()
        outbox = Outbox(registry=loader.registry)
        with psycopg.connect(dsn) as conn:
            for first in range(0, count, STAGE_CHUNK):
                chunk = range(first, min(count, first + STAGE_CHUNK))
                outbox.stage_many(conn, [flood_request(loader.queue, n) for n in chunk])
            conn.commit()
        stop = threading.Event()
        policy = FloodPolicy.off()
        with JobProducer(ctx.settings, registry=loader.registry, flood=policy) as producer:
            relay = OutboxRelay(RelayConfig(dsn=dsn, batch=500), producer, ctx.settings,
                                registry=loader.registry)  # fmt: skip
            thread = threading.Thread(target=relay.run, args=(stop,), daemon=True)
            thread.start()
            try:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    deadline = time.monotonic() + 600
                    while _waiting(conn):
                        if time.monotonic() > deadline or not thread.is_alive():
                            raise RuntimeError("the outbox relay did not move the flood")
                        time.sleep(0.05)
            finally:
                stop.set()
                thread.join(30)

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


def _waiting(conn: Any) -> int:
    row = conn.execute("SELECT count(*) FROM job_outbox").fetchone()
    return int(row[0]) if row else 0


def outbox_writer() -> OutboxWriter:
    return OutboxWriter()
