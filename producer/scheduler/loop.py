"""The leader's loop, written against small interfaces so it runs in unit tests.

Each step takes part in the leader election, and while leader: reads the last
fires once per term, then makes the fires that are due. Leadership is checked
again before every fire, so a leader that is revoked stops at once.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Protocol

from jobcore.cron_board import CronEntryView, LastFire
from producer.scheduler.entry import CronEntry
from producer.scheduler.table import CronTable, Fire, FireKind

__all__ = ["Board", "CronLoop", "FireSink", "Leader", "StateLog"]

log = logging.getLogger(__name__)

# Longest pause between two polls of the group: how late a new leader may start.
MAX_WAIT_S = 0.1
# How long an entry whose enqueue failed waits before the next attempt.
RETRY_AFTER = timedelta(seconds=5)


class Leader(Protocol):
    @property
    def term(self) -> int | None: ...

    def poll(self, timeout: float) -> None: ...


class StateLog(Protocol):
    def read(self) -> Mapping[str, LastFire]: ...

    def record(self, name: str, fire: LastFire) -> None: ...

    def poll(self) -> None: ...


class Board(Protocol):
    """Where the leader shows its entries with their next and last fires."""

    def replace(self, views: Iterable[CronEntryView]) -> None: ...

    def publish(self, view: CronEntryView) -> None: ...


class FireSink(Protocol):
    def __call__(self, fire: Fire) -> str:
        """Enqueue the job of ``fire``; returns its id once the broker has it."""
        ...


class CronLoop:
    """Fires the entries while ``leader`` says so; one thread calls :meth:`step`."""

    def __init__(
        self,
        *,
        leader: Leader,
        state: StateLog,
        sink: FireSink,
        grace: timedelta,
        clock: Callable[[], float],
        on_fire: Callable[[Fire, str], None] | None = None,
        board: Board | None = None,
        leader_id: str = "",
    ) -> None:
        self._leader = leader
        self._board = board
        self._leader_id = leader_id
        self._state = state
        self._sink = sink
        self._grace = grace
        self._clock = clock
        self._on_fire = on_fire
        self._entries: list[CronEntry] = []
        self._pending: queue.SimpleQueue[CronEntry] = queue.SimpleQueue()
        self._term: int | None = None
        self._table: CronTable | None = None
        self._last: dict[str, LastFire] = {}

    def add(self, entry: CronEntry) -> None:
        """Schedule ``entry`` from the next step on; safe from any thread."""
        self._pending.put(entry)

    @property
    def is_leader(self) -> bool:
        return self._table is not None

    def step(self) -> None:
        """Poll the group (up to until the next fire), then fire what is due if leader."""
        self._leader.poll(self._wait_s())
        self._state.poll()
        self._take_pending()
        term = self._leader.term
        if term is None:
            self._term, self._table = None, None
            return
        if term != self._term and not self._begin_term(term):
            return
        self._fire_due(term)

    def next_due(self) -> datetime | None:
        """The next fire time while leader; None when not leader or nothing is due."""
        return None if self._table is None else self._table.next_due()

    def _wait_s(self) -> float:
        due = self.next_due()
        if due is None:
            return MAX_WAIT_S
        return min(MAX_WAIT_S, max(0.0, due.timestamp() - self._clock()))

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    def _take_pending(self) -> None:
        while not self._pending.empty():
            entry = self._pending.get()
            self._entries.append(entry)
            if self._table is not None:
                self._track(self._table, entry, self._now())
                self._show(entry)

    def _begin_term(self, term: int) -> bool:
        """Read every entry's last fire before the first fire of this term."""
        try:
            self._last = dict(self._state.read())
        except Exception:
            log.exception("cannot read the last fires; not firing until they are known")
            self._table = None
            return False
        now = self._now()
        table = CronTable(grace=self._grace)
        for entry in self._entries:
            self._track(table, entry, now)
        if self._board is not None:  # shown before the first fire of the term
            self._board.replace(self._view(entry, table) for entry in self._entries)
        self._term, self._table = term, table
        log.info("leader for %d cron entries from %s", len(self._entries), now.isoformat())
        return True

    def _view(self, entry: CronEntry, table: CronTable) -> CronEntryView:
        """``entry`` as this leader runs it: what the board shows."""
        last = self._last.get(entry.name)
        return CronEntryView(
            name=entry.name,
            schedule=entry.schedule,
            timezone=entry.timezone,
            queue=entry.queue,
            type=entry.type,
            misfire=entry.misfire.value,
            next_fire_ms=_ms(table.next_fire(entry.name)),
            last_fire_ms=_ms(last.at) if last is not None else None,
            last_job_id=last.job_id if last is not None else None,
            leader=self._leader_id,
            published_ms=round(self._clock() * 1000),
        )

    def _show(self, entry: CronEntry) -> None:
        if self._board is not None and self._table is not None:
            self._board.publish(self._view(entry, self._table))

    def _track(self, table: CronTable, entry: CronEntry, now: datetime) -> None:
        last = self._last.get(entry.name)
        table.add(entry, since=last.at if last is not None else now)

    def _fire_due(self, term: int) -> None:
        assert self._table is not None
        now = self._now()
        due = self._table.due(now)
        for skip in due.skips:
            self._show(skip.entry)  # its next fire moved past the window it skipped
            log.warning(
                "cron %s: skipped the fires missed from %s to %s (misfire policy skip)",
                skip.entry.name,
                skip.first.isoformat(),
                skip.last.isoformat(),
            )
        failed: set[str] = set()
        for fire in due.fires:
            self._leader.poll(0)
            if self._leader.term != term:
                return  # revoked or lost: not one more fire
            if fire.entry.name not in failed and not self._fire(fire, now):
                failed.add(fire.entry.name)

    def _fire(self, fire: Fire, now: datetime) -> bool:
        assert self._table is not None
        try:
            job_id = self._sink(fire)
        except Exception as exc:  # one entry's failure must not stop the others
            log.error(
                "cron %s: enqueue failed (%s: %s); retrying in %ss",
                fire.dedupe_key,
                type(exc).__name__,
                exc,
                RETRY_AFTER.total_seconds(),
            )
            self._table.hold(fire.entry.name, now + RETRY_AFTER)
            return False
        last = LastFire(at=fire.at, job_id=job_id)
        self._state.record(fire.entry.name, last)
        self._last[fire.entry.name] = last
        self._table.fired(fire)
        self._show(fire.entry)
        late = (self._now() - fire.at).total_seconds()
        note = " (catch-up for a misfired window)" if fire.kind is FireKind.CATCH_UP else ""
        log.info(
            "cron fired %s as job %s on queue %s, %.3fs after its time%s",
            fire.dedupe_key,
            job_id,
            fire.entry.queue,
            late,
            note,
        )
        if self._on_fire is not None:
            self._on_fire(fire, job_id)
        return True


def _ms(instant: datetime) -> int:
    return round(instant.timestamp() * 1000)
