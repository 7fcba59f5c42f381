"""The threads that run ``def`` handlers, fed from one line of waiting jobs.

A ``ThreadPoolExecutor`` makes a ``Future`` (a ``Condition`` and its locks) and a
work item for every call, and tries to grow its pool on each submit; the runtime
never reads the future. Here a job is one tuple appended to a deque and taken by
whichever of the fixed threads is free.

Waking a parked thread costs more than a no-op job: the woken thread is scheduled,
finds the GIL held by the thread that woke it, and waits again, two context
switches for nothing, once per job when each job woke a thread of its own (a third
of a worker's Python time at 1,800 jobs/s). So at most one wake-up is under way at
a time: a submit wakes one parked thread, and a thread that takes a job while more
wait (and no other wake-up is pending) wakes one more before it runs it. Threads
join as fast as they actually get to run: a claimed batch of fast jobs is run by the
one or two threads that were scheduled, a batch of jobs that block (I/O, sleeps)
spreads over the pool one context switch per thread, as before.

A worker claims more jobs than it has threads (prefetch), so jobs wait here. A
job submitted ``first`` (a critical one) must not wait behind them: it goes on a
second line that every thread reads before the main one.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class HandlerThreads(Generic[T]):
    """``count`` daemon threads calling ``run(item)`` for each item submitted.

    Daemon, like the event loop thread: a handler that outlives the shutdown grace
    must not keep the process alive (its lease was released already).
    """

    def __init__(self, count: int, run: Callable[[T], None], *, name: str) -> None:
        if count < 1:
            raise ValueError(f"handler threads must be at least 1, got {count}")
        self._run = run
        self._lock = threading.Lock()
        self._items: deque[T] = deque()
        self._first: deque[T] = deque()
        # Parked threads, each blocked on acquiring its own (held) gate; the last
        # parked is woken first (its stack is the warmest).
        self._parked: list[threading.Lock] = []
        self._waking = False  # a parked thread was released and has not run yet
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}_{n}", daemon=True)
            for n in range(count)
        ]
        self._started = False
        self._closed = False

    @property
    def waiting(self) -> int:
        """Items submitted that no thread has taken yet."""
        return len(self._items) + len(self._first)

    def start(self) -> None:
        if not self._started:
            self._started = True
            for thread in self._threads:
                thread.start()

    def submit(self, items: Iterable[T], *, first: Iterable[T] = ()) -> None:
        """Queue items for the threads; one call for a claimed batch. ``first`` run
        before every item queued earlier that has not started."""
        with self._lock:
            if self._closed:
                raise RuntimeError("handler threads are shut down")
            self._first.extend(first)
            self._items.extend(items)
            self._wake_one()

    def shutdown(self, *, wait: bool) -> None:
        """Drop what has not started, stop the threads, join them when ``wait``."""
        with self._lock:
            self._closed = True
            self._first.clear()
            self._items.clear()
            parked, self._parked = self._parked, []
        for gate in parked:
            gate.release()
        if wait and self._started:
            for thread in self._threads:
                thread.join()

    def _wake_one(self) -> None:
        """Release one parked thread when items wait and no wake-up is under way;
        called with the lock held."""
        if not self._waking and self._parked and (self._items or self._first):
            self._waking = True
            self._parked.pop().release()

    def _take(self, gate: threading.Lock) -> T | None:
        """The next item, or None after parking on ``gate`` (the caller then blocks on
        it) or when shut down (``gate`` is then not parked)."""
        with self._lock:
            if self._first:
                item = self._first.popleft()
            elif self._items:
                item = self._items.popleft()
            else:
                if not self._closed:
                    self._parked.append(gate)
                return None
            self._wake_one()  # more waiting: let one more thread join in
            return item

    def _serve(self) -> None:
        gate = threading.Lock()
        gate.acquire()
        while True:
            item = self._take(gate)
            if item is None:
                if self._closed:
                    return
                gate.acquire()  # parked until released by _wake_one or shutdown
                with self._lock:
                    self._waking = False
                continue
            try:
                self._run(item)
            except BaseException:
                # The runtime settles every job it runs; an error here is its own bug,
                # and must not cost the pool a thread.
                log.exception("handler thread: unexpected error")
