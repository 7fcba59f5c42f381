"""The jobs a worker holds, from claim until the leasekeeper answered their settle.

One lock guards all of it, because the claim loop, the handler threads, the
heartbeat/timeout monitor and the settle thread all move the same jobs
through their life. A job holds one of the worker's ``concurrency`` slots
until it both stopped running and its settlement was answered (or dropped or
skipped), so the worker never has more than ``concurrency`` leases in hand.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable

from workers.context import JobContext
from workers.messages import ClaimedJob, LeaseRef


class Phase(enum.Enum):
    CLAIMED = "claimed"  # handed out, handler not started
    RUNNING = "running"
    DONE = "done"  # handler returned, or the job will never run here


class Held:
    """Bookkeeping for one held lease; mutated only under ``InFlight``'s lock. A
    slotted class, not a dataclass: compiled, a dataclass keeps its generated
    ``__init__``, run as Python for every job."""

    __slots__ = ("answered", "beat_interval_s", "cancel", "ctx", "deadline", "decided",
                 "lease", "next_beat_at", "phase", "result", "start_reported",
                 "started_at", "timeout_s", "until_ms")  # fmt: skip

    def __init__(
        self,
        *,
        lease: ClaimedJob,
        ctx: JobContext,
        until_ms: int,
        beat_interval_s: float,
        next_beat_at: float,
    ) -> None:
        self.lease = lease
        self.ctx = ctx
        self.until_ms = until_ms
        self.beat_interval_s = beat_interval_s
        self.next_beat_at = next_beat_at
        self.phase = Phase.CLAIMED
        self.timeout_s: float | None = None
        self.deadline: float | None = None
        # When the handler started: its run time is the job's cost.
        self.started_at: float | None = None
        self.start_reported = False  # a heartbeat told the leasekeeper it started
        self.decided = False  # a settlement was queued or deliberately skipped
        self.answered = False  # ...and the leasekeeper answered it, or it was dropped
        self.cancel: Callable[[], object] | None = None
        # The handler's encoded return value, set on its own thread before it settles.
        self.result = b""

    @property
    def ref(self) -> LeaseRef:
        return self.lease.ref

    @property
    def beating(self) -> bool:
        """Still ours and not yet settled, so its lease is worth extending."""
        return not self.decided and not self.ctx.is_cancelled


class InFlight:
    """The worker's held jobs and free slots."""

    def __init__(self, *, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.concurrency = concurrency
        self._cond = threading.Condition()
        self._held: dict[LeaseRef, Held] = {}
        # Who waits, so a change wakes only those it concerns: waking the monitor for
        # every job added, started and freed cost a thread switch each, a fifth of a
        # no-op job's worker time. The monitor sleeps until ``_monitor_until`` (-inf
        # while it is awake: it reads the table again before it sleeps).
        self._monitor_until = float("-inf")
        self._start_report_s: float | None = None
        self._change_waiters = 0  # wait_until callers: woken by every change
        self._free_waiters = 0  # the claim loop in wait_free: woken by what it waits for
        # With wait_free(finished_count=True): how many free-or-finished slots it waits
        # for (0: it does not), so a finish wakes it only once there are that many.
        self._finished_wanted = 0
        # Held jobs that have a handler or wait for one (not DONE), and those that wait
        # (CLAIMED), kept as they change: read on every wake-up of the claim loop.
        self._active = 0
        self._waiting = 0

    def __len__(self) -> int:
        with self._cond:
            return len(self._held)

    def free(self) -> int:
        with self._cond:
            return max(0, self.concurrency - len(self._held))

    def wait_free(
        self,
        stop: threading.Event,
        timeout: float,
        *,
        enough: int = 1,
        gather_s: float = 0.0,
        finished_count: bool = False,
    ) -> int:
        """Block until a slot is free or ``stop`` is set (``wake()`` is called on stop);
        the free slots then. With ``finished_count`` the slots of finished jobs whose
        settlement is not answered yet count as free (the caller settles them in
        the call that refills them).

        With ``gather_s``, a free slot found while held jobs still wait for a handler
        waits up to that long for ``enough`` free slots, or until the last waiting job
        starts. Slots free when a settle is answered, so a claim after every answer
        carried the few slots it freed; gathering makes one claim of several answers',
        sent while the handlers still have work, so none goes idle for it.
        """

        def free() -> int:
            return self.concurrency - (self._active if finished_count else len(self._held))

        def gathered() -> bool:
            room = free()
            if room >= enough or stop.is_set():
                return True
            return room > 0 and self._waiting == 0

        with self._cond:
            self._free_waiters += 1
            try:
                self._finished_wanted = 1 if finished_count else 0
                found = self._cond.wait_for(lambda: stop.is_set() or free() > 0, timeout)
                if found and gather_s > 0:
                    self._finished_wanted = enough if finished_count else 0
                    self._cond.wait_for(gathered, gather_s)
            finally:
                self._free_waiters -= 1
                self._finished_wanted = 0
            return max(0, free())

    def claim_waits_for_finished(self) -> bool:
        """The claim loop waits in ``wait_free(finished_count=True)``: it will settle
        the finished jobs itself, in the call that refills their slots."""
        return self._finished_wanted > 0

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def add(
        self, lease: ClaimedJob, ctx: JobContext, *, now: float, beat_interval_s: float
    ) -> Held:
        held = Held(
            lease=lease,
            ctx=ctx,
            until_ms=lease.until_ms,
            beat_interval_s=beat_interval_s,
            next_beat_at=now + beat_interval_s,
        )
        with self._cond:
            self._held[lease.ref] = held
            self._active += 1
            self._waiting += 1
            self._wake_for(held.next_beat_at)
        return held

    def start(self, held: Held, *, now: float, timeout_s: float | None) -> bool:
        """Move a claimed job to running; False when it was released meanwhile."""
        with self._cond:
            if held.phase is not Phase.CLAIMED or held.decided:
                return False
            held.phase = Phase.RUNNING
            self._waiting -= 1
            if self._waiting == 0 and self._free_waiters:
                self._cond.notify_all()  # a gathering claim need not wait any longer
            held.timeout_s = timeout_s
            held.started_at = now
            held.deadline = None if timeout_s is None else now + timeout_s
            report = self._start_report_s
            self._wake_for(min(
                float("inf") if held.deadline is None else held.deadline,
                float("inf") if report is None else now + report,
            ))  # fmt: skip
            return True

    def _wake_for(self, due: float) -> None:
        """A job needs the monitor at ``due``: wake it if it sleeps past that, and
        whoever waits for the table to change."""
        if due < self._monitor_until or self._change_waiters:
            self._cond.notify_all()

    def decide(self, held: Held) -> bool:
        """Claim the one right to settle this lease; False when already settled or lost."""
        with self._cond:
            if held.decided:
                return False
            held.decided = True
            return True

    def finish(self, held: Held) -> None:
        """The handler returned (or the job will never run): it no longer needs a thread."""
        with self._cond:
            if held.phase is not Phase.DONE:
                self._waiting -= held.phase is Phase.CLAIMED
                held.phase = Phase.DONE
                self._active -= 1
                wanted = self._finished_wanted
                if wanted and self.concurrency - self._active >= wanted:
                    self._cond.notify_all()
            self._release_slot(held)

    def answer(self, held: Held) -> None:
        """The settlement was answered, dropped or skipped: the lease is no longer ours."""
        with self._cond:
            held.decided = True
            held.answered = True
            self._release_slot(held)

    def take_unstarted(self) -> list[Held]:
        """Atomically claim the right to settle every job that has not started."""
        with self._cond:
            taken = [h for h in self._held.values() if h.phase is Phase.CLAIMED and not h.decided]
            for held in taken:
                held.decided = True
                held.phase = Phase.DONE
            self._active -= len(taken)
            self._waiting -= len(taken)
            return taken

    def running(self) -> list[Held]:
        with self._cond:
            return [h for h in self._held.values() if h.phase is Phase.RUNNING]

    def wait_until(self, predicate: Callable[[list[Held]], bool], timeout: float) -> bool:
        """Wait until ``predicate(held jobs)`` holds; False when ``timeout`` ran out first."""
        with self._cond:
            self._change_waiters += 1
            try:
                return self._cond.wait_for(lambda: predicate(list(self._held.values())), timeout)
            finally:
                self._change_waiters -= 1

    def beats_due(self, now: float) -> list[Held]:
        """All jobs worth heartbeating, when at least one of them is due; else nothing.

        One batch carries every held lease, so a worker sends one Heartbeat per
        shortest-lease third rather than one per job.
        """
        with self._cond:
            beating = [h for h in self._held.values() if h.beating]
            if any(h.next_beat_at <= now for h in beating):
                return beating
            return []

    def beating(self) -> list[Held]:
        """Every job whose lease is still worth extending (what a heartbeat may name)."""
        with self._cond:
            return [h for h in self._held.values() if h.beating]

    def waiting_or_running(self) -> int:
        """Jobs that have a handler or wait for one (``concurrency`` minus this is the
        number of handlers a claim would find idle)."""
        with self._cond:
            return self._active

    def starts_due(self, now: float, after_s: float) -> list[Held]:
        """Running jobs whose start the leasekeeper has not heard of, started at least
        ``after_s`` ago: jobs that finish sooner are settled instead of reported."""
        with self._cond:
            return [h for h in self._held.values() if _start_unreported(h) and (
                h.started_at is not None and h.started_at + after_s <= now)]  # fmt: skip

    def reported_started(self, held: list[Held]) -> None:
        with self._cond:
            for h in held:
                h.start_reported = True

    def timeouts_due(self, now: float) -> list[Held]:
        with self._cond:
            return [
                h
                for h in self._held.values()
                if h.phase is Phase.RUNNING
                and not h.decided
                and h.deadline is not None
                and h.deadline <= now
            ]

    def next_due(self, start_report_s: float | None = None) -> float | None:
        """When the monitor next has something to do: a heartbeat, a deadline, or (with
        ``start_report_s``) a start to report."""
        with self._cond:
            self._start_report_s = start_report_s
            times = [h.next_beat_at for h in self._held.values() if h.beating]
            if start_report_s is not None:
                times += [
                    h.started_at + start_report_s
                    for h in self._held.values()
                    if _start_unreported(h) and h.started_at is not None
                ]
            times += [
                h.deadline
                for h in self._held.values()
                if h.phase is Phase.RUNNING and not h.decided and h.deadline is not None
            ]
            return min(times, default=None)

    def wait_change(self, timeout: float, *, until: float) -> None:
        """The monitor's sleep: until a job needs it before ``until`` (the monitor's
        clock ``timeout`` seconds from now), or ``timeout`` passes."""
        with self._cond:
            self._monitor_until = until
            try:
                self._cond.wait(timeout)
            finally:
                self._monitor_until = float("-inf")

    def reschedule(self, held: list[Held], *, now: float, retry_s: float | None = None) -> None:
        """Set the next heartbeat: a full interval on, or sooner (``retry_s``) after a failure."""
        with self._cond:
            for h in held:
                step = h.beat_interval_s if retry_s is None else min(retry_s, h.beat_interval_s)
                h.next_beat_at = now + step

    def extend(self, held: Held, until_ms: int) -> None:
        with self._cond:
            held.until_ms = max(held.until_ms, until_ms)

    def expired(self, now_ms: int) -> list[Held]:
        """Leases whose deadline passed without a successful heartbeat (leasekeeper away)."""
        with self._cond:
            return [h for h in self._held.values() if h.beating and 0 < h.until_ms < now_ms]

    def _release_slot(self, held: Held) -> None:
        if held.phase is Phase.DONE and held.answered:
            if self._held.get(held.ref) is held:
                del self._held[held.ref]
            if self._free_waiters or self._change_waiters:
                self._cond.notify_all()


def _start_unreported(held: Held) -> bool:
    return held.phase is Phase.RUNNING and held.beating and not held.start_reported
