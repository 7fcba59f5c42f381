"""A Postgres job queue with ``FOR UPDATE SKIP LOCKED``: the claim query users write themselves.

One table; a claim marks up to ``batch`` pending rows as running in one
statement (``SKIP LOCKED`` so workers never wait on each other's rows), the
handler runs, and finished rows are deleted in one statement per batch. Every
statement is its own transaction with ``synchronous_commit=on``: a claimed or
finished job is on disk before the worker goes on, as an enqueue is for us.

    python -m benchmarks.peers.pgqueue --dsn DSN --threads 8 --batch 1 --sleep-ms 10
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from collections.abc import Iterable
from types import FrameType

import psycopg

from benchmarks import progress

SCHEMA = """
CREATE TABLE IF NOT EXISTS bench_jobs (
    id bigserial PRIMARY KEY,
    tenant text NOT NULL,
    payload jsonb NOT NULL,
    status smallint NOT NULL DEFAULT 0,
    claimed_at timestamptz
);
CREATE INDEX IF NOT EXISTS bench_jobs_pending ON bench_jobs (id) WHERE status = 0;
"""

CLAIM = """
UPDATE bench_jobs SET status = 1, claimed_at = now()
WHERE id IN (
    SELECT id FROM bench_jobs WHERE status = 0 ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
)
RETURNING id, payload
"""

FINISH = "DELETE FROM bench_jobs WHERE id = ANY(%s)"


def prepare(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute("TRUNCATE bench_jobs")


def load(dsn: str, rows: Iterable[tuple[str, str]]) -> None:
    """Bulk-insert (tenant, payload JSON) rows with COPY, then refresh the planner's stats."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.cursor() as cur, cur.copy("COPY bench_jobs (tenant, payload) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        conn.execute("ANALYZE bench_jobs")


def work(dsn: str, batch: int, sleep_s: float, halt: threading.Event) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not halt.is_set():
            claimed = conn.execute(CLAIM, (batch,)).fetchall()
            if not claimed:
                time.sleep(0.01)
                continue
            for _ in claimed:
                if sleep_s:
                    time.sleep(sleep_s)
                progress.hit()
            conn.execute(FINISH, ([row[0] for row in claimed],))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers.pgqueue")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--sleep-ms", type=float, default=0.0)
    args = parser.parse_args()
    halt = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        halt.set()

    signal.signal(signal.SIGTERM, on_term)
    threads = [
        threading.Thread(target=work, args=(args.dsn, args.batch, args.sleep_ms / 1000, halt))
        for _ in range(args.threads)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
