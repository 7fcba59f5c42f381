"""The lease store: what a leasekeeper must remember across its own restart.

RocksDB (``rocksdict``) keeps, per partition and offset beyond the committed
offset, the resolution of each finished job, the number of claims made and the
lease in flight, so a restarted leasekeeper on the same disk neither re-runs an
acked job, nor forgets how many attempts a job has used, nor takes a job away
from a worker that still holds a valid lease on it.

One key per job (``o/<topic>/<partition>/`` and the offset as 8 big-endian
bytes) holds its whole state, so each state change is one put: ``L`` claims and
the lease in flight (``W`` the same for a job still waiting in its worker's
prefetch), ``C`` claims only (the lease ended without a resolution yet), ``R``
and a resolution code. Stores written before this layout (a key
each for resolution, claims and lease, ``r/``, ``c/``, ``l/``) are still read,
and forgotten below each commit like the rest. Kafka keeps the jobs; this is an index and a
memory, never the only copy of a job (no job lives only in local state). Writes are grouped into one
``WriteBatch`` per RPC or loop iteration.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from leasekeeper.core.store_values import (
    JobNote,
    LeaseRecord,
    NoteKind,
    PartitionMemory,
    Resolution,
    acked_value,
    claims_value,
    remember,
    resolved_value,
)

__all__ = ["LeaseStore", "StoreBatch"]

OFFSET_WIDTH = 20
# Facts about the store itself live under their own prefix, apart from the
# per-partition keys ("o/", "u/", "f/"; before one key per job "r/", "c/", "l/").
_META = b"meta/"
# Jobs by id ("j/<job id>"): delayed and skipped jobs, for ``inspect job``.
_NOTES = b"j/"
# Every key the store writes starts with printable ASCII, so this range holds them all.
_ALL_KEYS = (b"\x00", b"\xff")
# The per-partition keys of stores written before one key per job held all its state.
_LEGACY_KINDS = ("r", "c", "l")


def _note_key(job_id: str) -> bytes:
    return _NOTES + job_id.encode()


def _key(kind: str, topic: str, partition: int, offset: int) -> bytes:
    return f"{kind}/{topic}/{partition}/{offset:0{OFFSET_WIDTH}d}".encode()


def _prefix(kind: str, topic: str, partition: int) -> bytes:
    return f"{kind}/{topic}/{partition}/".encode()


@lru_cache(maxsize=4096)
def _state_prefix(topic: str, partition: int) -> bytes:
    """Made once per partition, not per write."""
    return f"o/{topic}/{partition}/".encode()


def _state_key(topic: str, partition: int, offset: int) -> bytes:
    return _state_prefix(topic, partition) + offset.to_bytes(8, "big")


def _overflow_key(topic: str, partition: int) -> bytes:
    """The tenants in overflow on a partition (one key per partition, apart from the
    per-job keys)."""
    return f"f/{topic}/{partition}".encode()


def _own_commit_key(topic: str, partition: int) -> bytes:
    """The last commit this store's leasekeeper saw Kafka accept for a partition: a
    fact about the store, so under ``meta/``. When Kafka still holds that commit,
    the store knows more than its metadata."""
    return _META + f"commit/{topic}/{partition}".encode()


class StoreBatch:
    """Writes collected for one atomic ``LeaseStore.write``. Each of ``resolve``,
    ``claims`` and ``lease`` replaces the job's whole state: one put per change."""

    def __init__(self) -> None:
        self._batch = WriteBatch(raw_mode=True)

    def resolve(self, topic: str, partition: int, offset: int, how: Resolution) -> None:
        self._batch.put(_state_key(topic, partition, offset), resolved_value(how))

    def acked(self, topic: str, partition: int, offset: int, token: str) -> None:
        """Resolved by an ack with lease token ``token``, kept with it: a restarted
        leasekeeper answers the same ack sent again (its answer was lost in the
        restart) as applied, not as an unknown lease."""
        self._batch.put(_state_key(topic, partition, offset), acked_value(token))

    def claims(self, topic: str, partition: int, offset: int, count: int) -> None:
        """Claims made on the job and no lease in flight (it ended, or was released)."""
        self._batch.put(_state_key(topic, partition, offset), claims_value(count))

    def lease(self, topic: str, partition: int, offset: int, value: bytes) -> None:
        """The job leased: ``value`` is ``leased_value(...)``, claims and lease in one."""
        self._batch.put(_state_key(topic, partition, offset), value)

    def unhandled(self, topic: str, partition: int, offset: int, since_ms: int) -> None:
        self._batch.put(_key("u", topic, partition, offset), str(since_ms).encode())

    def refunds(self, topic: str, partition: int, offset: int, count: int) -> None:
        """Attempts given back to the job (``started_only``); rare, so a key of its own."""
        self._batch.put(_key("f", topic, partition, offset), str(count).encode())

    def own_commit(self, topic: str, partition: int, offset: int, metadata: str) -> None:
        """Kafka accepted this commit of ours: everything it says is in the store too."""
        self._batch.put(_own_commit_key(topic, partition), f"{offset}:{metadata}".encode())

    def note(self, note: JobNote) -> None:
        self._batch.put(_note_key(note.job_id), note.encode())

    def forget_note(self, job_id: str) -> None:
        self._batch.delete(_note_key(job_id))

    def overflow(self, topic: str, partition: int, text: str) -> None:
        """The tenants in overflow on a partition (``overflow_lane.encode``; "" deletes)."""
        key = _overflow_key(topic, partition)
        if text:
            self._batch.put(key, text.encode())
        else:
            self._batch.delete(key)

    def forget_below(
        self, topic: str, partition: int, offset: int, *, legacy: bool = False
    ) -> None:
        """Drop everything below a committed offset: Kafka will never hand it out again
        (``legacy``: the keys of the layout before one key per job too)."""
        self._batch.delete_range(
            _state_key(topic, partition, 0), _state_key(topic, partition, max(0, offset))
        )
        for kind in ("u", "f", *(_LEGACY_KINDS if legacy else ())):
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
        # Keys of the layout before one key per job: read and forgotten like the rest.
        self.legacy = any(self._has_prefix(f"{kind}/".encode()) for kind in _LEGACY_KINDS)

    def _has_prefix(self, prefix: bytes) -> bool:
        for key, _ in self._db.items(from_key=prefix):
            assert isinstance(key, bytes)  # raw mode
            return key.startswith(prefix)
        return False

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
        """Resolutions, claim counts and leases at or beyond ``from_offset``."""
        memory = self._load_legacy(topic, partition, from_offset) if self.legacy else None
        resolved = memory.resolved if memory else {}
        claims = memory.claims if memory else {}
        leases = memory.leases if memory else {}
        acked_tokens: dict[int, str] = {}
        prefix = _state_prefix(topic, partition)
        start = _state_key(topic, partition, max(0, from_offset))
        for key, value in self._db.items(from_key=start):
            assert isinstance(key, bytes) and isinstance(value, bytes)  # raw mode
            if not key.startswith(prefix):
                break
            offset = int.from_bytes(key[len(prefix) :], "big")
            # The job's one value says all: drop what the legacy keys said of it.
            resolved.pop(offset, None)
            claims.pop(offset, None)
            leases.pop(offset, None)
            remember(value, offset, resolved, claims, leases, acked_tokens)
        unhandled = {
            offset: int(value) for offset, value in self._scan("u", topic, partition, from_offset)
        }
        refunds = {
            offset: int(value) for offset, value in self._scan("f", topic, partition, from_offset)
        }
        return PartitionMemory(resolved=resolved, claims=claims, leases=leases,
                               unhandled=unhandled, refunds=refunds,
                               acked_tokens=acked_tokens)  # fmt: skip

    def own_commit(self, topic: str, partition: int) -> tuple[int, str] | None:
        """The last commit of this partition that Kafka accepted from this store's
        leasekeeper, as (offset, metadata), if any."""
        value = self._db.get(_own_commit_key(topic, partition))
        if not isinstance(value, bytes):
            return None
        offset, _, metadata = value.decode().partition(":")
        return int(offset), metadata

    def _load_legacy(self, topic: str, partition: int, from_offset: int) -> PartitionMemory:
        """What a store of the layout before one key per job knows of the partition."""
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
        return PartitionMemory(resolved=resolved, claims=claims, leases=leases)

    def overflow(self, topic: str, partition: int) -> str:
        """The tenants in overflow on a partition, as ``StoreBatch.overflow`` wrote them."""
        value = self._db.get(_overflow_key(topic, partition))
        assert value is None or isinstance(value, bytes)  # raw mode
        return value.decode() if value else ""

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
