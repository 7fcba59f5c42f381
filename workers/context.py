"""What a handler knows about the job it is running."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from jobcore.progress import JobProgress, checked


class _Signals:
    """What the runtime and a running handler tell each other about one job: why the
    job stopped being ours (recorded once, thread-safely), and the handler's latest
    progress, which the lease monitor sends with its next heartbeat.

    The ``Event`` is made only when a handler asks for it: most handlers never
    do, and an ``Event`` (a ``Condition`` and its locks) per job is a measurable
    part of a no-op job's cost. ``reason`` alone says whether the lease is lost.
    Likewise ``progress`` stays the class's None until a handler reports one.
    """

    progress: JobProgress | None = None
    # Counts the reports of every job in the process (``progress_reports``): a lease
    # monitor walks its jobs for values to send only when it changed since its last
    # walk, so a worker whose handlers never report never does. An increment lost to
    # a race still changes the count.
    reports: ClassVar[int] = 0

    def __init__(self) -> None:
        self.reason: str | None = None
        self._event: threading.Event | None = None

    # One lock for every job's loss: a loss is marked, or its event made, once in a
    # job's life at most, so they never contend; a lock per job was made for nothing.
    _lock = threading.Lock()

    @property
    def event(self) -> threading.Event:
        with self._lock:
            if self._event is None:
                self._event = threading.Event()
                if self.reason is not None:
                    self._event.set()
            return self._event

    @property
    def lost(self) -> bool:
        return self.reason is not None

    def mark(self, reason: str) -> bool:
        with self._lock:
            if self.reason is not None:
                return False
            self.reason = reason
            if self._event is not None:
                self._event.set()
            return True


@dataclass(frozen=True, kw_only=True)
class JobContext:
    """Passed to every handler call next to the payload.

    ``job_id`` is the idempotency key: delivery is at least once, so a handler
    whose side effects must not repeat should record ``job_id`` with them.

    ``lease_lost`` is set when the job is no longer this worker's to finish:
    the leasekeeper refused a heartbeat (another worker may run it now), the
    job ran past its ``timeout_s``, or shutdown's grace period ran out. A
    long handler should poll ``ctx.lease_lost.is_set()`` (or ``is_cancelled``)
    between steps and stop early; whatever it returns afterwards is not acked.
    """

    job_id: str
    attempt: int
    tenant_id: str
    queue: str
    type: str
    created_at_ms: int
    lease_id: str
    max_attempts: int = 0
    # W3C trace context of the code that enqueued the job (``traceparent``), if any.
    trace: Mapping[str, str] = field(default_factory=dict)
    _signals: _Signals = field(default_factory=_Signals, repr=False, compare=False)

    @property
    def lease_lost(self) -> threading.Event:
        """Set once the lease is gone; a handler may ``wait()`` on it or poll it."""
        return self._signals.event

    @property
    def lease_lost_reason(self) -> str | None:
        """Why the lease was lost ("stale token", "timed out after 30s", ...), else None."""
        return self._signals.reason

    @property
    def is_cancelled(self) -> bool:
        """True when the handler should stop: its result will not be acked."""
        return self._signals.lost

    def mark_lease_lost(self, reason: str) -> bool:
        """Runtime use: record the loss; False when it was already recorded."""
        return self._signals.mark(reason)

    def progress(self, fraction: float, message: str = "") -> None:
        """Say how far the job has got: ``fraction`` from 0 to 1 (0.4 for 40%) and an
        optional status line of at most ``jobcore.progress.MESSAGE_MAX`` characters.
        Cheap enough for a tight loop: only the latest value is kept, and it goes to
        the leasekeeper with one of the worker's heartbeats, within about two seconds,
        so a call never waits for the network. A ValueError for a fraction outside 0..1
        or NaN, or a longer message; a TypeError for a value that is no number."""
        self._signals.progress = checked(fraction, message)
        _Signals.reports += 1

    @property
    def last_progress(self) -> JobProgress | None:
        """The latest progress the handler reported, None before the first."""
        return self._signals.progress


def progress_reports() -> int:
    """How many progress reports the handlers of this process have made: a lease
    monitor looks for values to send when it changed."""
    return _Signals.reports
