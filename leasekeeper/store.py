"""The lease store: what a leasekeeper must remember across its own restart.

RocksDB (``rocksdict``) keeps, per partition and offset beyond the committed
offset, the resolution of each finished job, the number of claims made and the
lease in flight, so a restarted leasekeeper on the same disk neither re-runs an
acked job, nor forgets how many attempts a job has used, nor takes a job away
from a worker that still holds a valid lease on it. Kafka keeps the jobs; this is an index and a
memory, never the only copy of a job (no job lives only in local state). Writes are grouped into one
``WriteBatch`` per RPC or loop iteration.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

OFFSET_WIDTH = 20
# Facts about the store itself live under their own prefix, apart from the
# per-partition keys ("r/", "c/", "l/", "u/", "f/").
_META = b"meta/"
# Jobs by id ("j/<job id>"): delayed and skipped jobs, for ``inspect job``.
_NOTES = b"j/"
# Every key the store writes is printable ASCII, so this range holds them all.
_ALL_KEYS = (b"\x00", b"\xff")


class NoteKind(StrEnum):
    """Why the store remembers a job by id (see ``JobNote``)."""

    DELAYED = "delayed"
    SKIPPED_DUPLICATE = "skipped_duplicate"
    # Cancelled while it waited (never run), or while it ran (its lease ended).
    CANCELLED_WAITING = "cancelled_waiting"
    CANCELLED_RUNNING = "cancelled_running"


@dataclass(frozen=True, kw_only=True)
class JobNote:
    """A job the leasekeeper saw but does not hold in its window, by job id: a
    delay-tier record waiting for its due time, a job skipped as a duplicate, or
    a cancelled one (skipped while waiting, or its lease ended while running).

    Offsets index the partition state; ``inspect job ID`` needs the other way round,
    and a person asks by id. ``due_ms`` is the run time of a delayed job;
    ``duplicate_of`` the id of the job that claimed the dedupe key first.
    """

    job_id: str
    kind: NoteKind
    topic: str
    partition: int
    offset: int
    seen_ms: int
    due_ms: int | None = None
    duplicate_of: str | None = None

    def encode(self) -> bytes:
        return json.dumps(
            [
                self.kind.value,
                self.topic,
                self.partition,
                self.offset,
                self.seen_ms,
                self.due_ms,
                self.duplicate_of,
            ]
        ).encode()

    @classmethod
    def decode(cls, job_id: str, raw: bytes) -> JobNote:
        kind, topic, partition, offset, seen_ms, due_ms, duplicate_of = json.loads(raw)
        return cls(
            job_id=job_id,
            kind=NoteKind(kind),
            topic=topic,
            partition=partition,
            offset=offset,
            seen_ms=seen_ms,
            due_ms=due_ms,
            duplicate_of=duplicate_of,
        )


def _own_commit_key(topic: str, partition: int) -> bytes:
    """The last commit this store's leasekeeper saw Kafka accept for a partition: a
    fact about the store, so under ``meta/``. When Kafka still holds that commit,
    the store knows more than its metadata."""
    return _META + f"commit/{topic}/{partition}".encode()


def _note_key(job_id: str) -> bytes:
    return _NOTES + job_id.encode()


class Resolution(StrEnum):
    ACKED = "acked"
    RETRIED = "retried"
    HOPPED = "hopped"
    PARKED = "parked"
    DEAD = "dead"
    SKIPPED = "skipped"


@dataclass(frozen=True, kw_only=True)
class LeaseRecord:
    """A lease as persisted: enough for a restarted leasekeeper to honour its token."""

    token: str
    worker: str
    attempt: int
    started_ms: int
    until_ms: int
    # False while the job waits in its worker's prefetch (see ``started_only``). A
    # record without the flag (every running job, and records from before it
    # existed) is a started job, so the conservative reading spends the attempt.
    started: bool = True

    def encode(self) -> bytes:
        fields: list[object] = [
            self.token, self.worker, self.attempt, self.started_ms, self.until_ms
        ]  # fmt: skip
        if not self.started:
            fields.append(False)
        return json.dumps(fields).encode()

    @classmethod
    def decode(cls, raw: bytes) -> LeaseRecord:
        token, worker, attempt, started_ms, until_ms, *rest = json.loads(raw)
        return cls(
            token=token,
            worker=worker,
            attempt=attempt,
            started_ms=started_ms,
            until_ms=until_ms,
            started=bool(rest[0]) if rest else True,
        )


@dataclass(frozen=True, kw_only=True)
class PartitionMemory:
    """What the store remembers of one partition beyond its committed offset."""

    resolved: dict[int, Resolution]
    claims: dict[int, int]
    leases: dict[int, LeaseRecord]
    # When no connected worker could take the job first (epoch ms): the grace
    # before it fails as an unknown job type counts from there, across restarts.
    unhandled: dict[int, int] = field(default_factory=dict)
    # Attempts given back to jobs whose lease expired before they started: the
    # bound that keeps a job that kills its worker from being refunded forever.
    refunds: dict[int, int] = field(default_factory=dict)


def _key(kind: str, topic: str, partition: int, offset: int) -> bytes:
    return f"{kind}/{topic}/{partition}/{offset:0{OFFSET_WIDTH}d}".encode()


def _prefix(kind: str, topic: str, partition: int) -> bytes:
    return f"{kind}/{topic}/{partition}/".encode()


class StoreBatch:
    """Writes collected for one atomic ``LeaseStore.write``."""

    def __init__(self) -> None:
        self._batch = WriteBatch(raw_mode=True)

    def resolve(self, topic: str, partition: int, offset: int, how: Resolution) -> None:
        self._batch.put(_key("r", topic, partition, offset), how.value.encode())

    def claims(self, topic: str, partition: int, offset: int, count: int) -> None:
        self._batch.put(_key("c", topic, partition, offset), str(count).encode())

    def lease(self, topic: str, partition: int, offset: int, record: LeaseRecord) -> None:
        self._batch.put(_key("l", topic, partition, offset), record.encode())

    def refunds(self, topic: str, partition: int, offset: int, count: int) -> None:
        self._batch.put(_key("f", topic, partition, offset), str(count).encode())

    def unhandled(self, topic: str, partition: int, offset: int, since_ms: int) -> None:
        self._batch.put(_key("u", topic, partition, offset), str(since_ms).encode())

    def own_commit(self, topic: str, partition: int, offset: int, metadata: str) -> None:
        """Kafka accepted this commit of ours: everything it says is in the store too."""
        self._batch.put(_own_commit_key(topic, partition), f"{offset}:{metadata}".encode())

    def note(self, note: JobNote) -> None:
        self._batch.put(_note_key(note.job_id), note.encode())

    def forget_note(self, job_id: str) -> None:
        self._batch.delete(_note_key(job_id))

    def unlease(self, topic: str, partition: int, offset: int) -> None:
        self._batch.delete(_key("l", topic, partition, offset))

    def forget_below(self, topic: str, partition: int, offset: int) -> None:
        """Drop everything below a committed offset: Kafka will never hand it out again."""
        for kind in ("r", "c", "l", "u", "f"):
            self._batch.delete_range(
                _key(kind, topic, partition, 0), _key(kind, topic, partition, offset)
            )

    @property
    def raw(self) -> WriteBatch:
        return self._batch

    def __len__(self) -> int:
        return int(self._batch.len())


class LeaseStore:
    """A RocksDB database in ``path``; one per leasekeeper."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        self._db = Rdict(str(path), options)
        self._write_options = WriteOptions()
        # A process crash keeps what reached the WAL; sync=False is enough for
        # kill -9 of the leasekeeper and keeps one batch write in microseconds.
        self._write_options.sync = False

    def batch(self) -> StoreBatch:
        return StoreBatch()

    def write(self, batch: StoreBatch) -> None:
        if len(batch):
            self._db.write(batch.raw, self._write_options)

    def meta(self, name: str) -> bytes | None:
        """A fact about the store (e.g. which cluster and topics it belongs to)."""
        value = self._db.get(_META + name.encode())
        assert value is None or isinstance(value, bytes)  # raw mode
        return value

    def put_meta(self, name: str, value: bytes) -> None:
        self._db.put(_META + name.encode(), value, self._write_options)

    def clear(self) -> None:
        """Forget everything: the state of another cluster or topic is worse than none."""
        self._db.delete_range(*_ALL_KEYS, self._write_options)

    def load(self, topic: str, partition: int, from_offset: int) -> PartitionMemory:
        """Resolutions and claim counts at or beyond ``from_offset``."""
        resolved = {
            offset: Resolution(value.decode())
            for offset, value in self._scan("r", topic, partition, from_offset)
        }
        claims = {
            offset: int(value) for offset, value in self._scan("c", topic, partition, from_offset)
        }
        leases = {
            offset: LeaseRecord.decode(value)
            for offset, value in self._scan("l", topic, partition, from_offset)
        }
        unhandled = {
            offset: int(value) for offset, value in self._scan("u", topic, partition, from_offset)
        }
        refunds = {
            offset: int(value) for offset, value in self._scan("f", topic, partition, from_offset)
        }
        return PartitionMemory(
            resolved=resolved, claims=claims, leases=leases, unhandled=unhandled, refunds=refunds
        )

    def own_commit(self, topic: str, partition: int) -> tuple[int, str] | None:
        """The last commit of this partition that Kafka accepted from this store's
        leasekeeper, as (offset, metadata), if any."""
        value = self._db.get(_own_commit_key(topic, partition))
        if not isinstance(value, bytes):
            return None
        offset, _, metadata = value.decode().partition(":")
        return int(offset), metadata

    def notes(self, id_prefix: str, limit: int = 10) -> list[JobNote]:
        """Up to ``limit`` notes whose job id starts with ``id_prefix`` (a whole id
        gives at most that job): a prefix scan, like git's short ids."""
        start = _note_key(id_prefix)
        found: list[JobNote] = []
        for key, value in self._db.items(from_key=start):
            assert isinstance(key, bytes) and isinstance(value, bytes)  # raw mode
            if not key.startswith(start) or len(found) >= limit:
                break
            found.append(JobNote.decode(key[len(_NOTES) :].decode(), value))
        return found

    def prune_notes(self, *, seen_before_ms: int, due_before_ms: int) -> int:
        """Drop notes of jobs skipped or cancelled before ``seen_before_ms`` and of delayed
        jobs due before ``due_before_ms`` (their tier record moved on, or another
        leasekeeper took the partition); returns how many. A scan of every note: run
        it rarely."""
        batch = WriteBatch(raw_mode=True)
        dropped = 0
        for key, value in self._db.items(from_key=_NOTES):
            assert isinstance(key, bytes) and isinstance(value, bytes)  # raw mode
            if not key.startswith(_NOTES):
                break
            note = JobNote.decode(key[len(_NOTES) :].decode(), value)
            if note.kind is NoteKind.DELAYED:
                stale = note.due_ms is not None and note.due_ms < due_before_ms
            else:
                stale = note.seen_ms < seen_before_ms
            if stale:
                batch.delete(key)
                dropped += 1
        if dropped:
            self._db.write(batch, self._write_options)
        return dropped

    def _scan(
        self, kind: str, topic: str, partition: int, from_offset: int
    ) -> Iterable[tuple[int, bytes]]:
        prefix = _prefix(kind, topic, partition)
        start = _key(kind, topic, partition, max(0, from_offset))
        for key, value in self._db.items(from_key=start):
            assert isinstance(key, bytes) and isinstance(value, bytes)  # raw mode
            if not key.startswith(prefix):
                break
            yield int(key[len(prefix) :]), value

    def close(self) -> None:
        self._db.close()
