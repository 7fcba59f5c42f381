"""The threads that run ``def`` handlers, fed from one queue.

A ``ThreadPoolExecutor`` makes a ``Future`` (a ``Condition`` and its locks) and a
work item for every call, and tries to grow its pool on each submit; the runtime
never reads the future. Here a job is one tuple on a deque, taken by whichever of
the fixed threads is free: a no-op job's cost is the handler, not the dispatch.

Waking threads is what costs. A claimed batch of forty jobs put on a plain queue
wakes forty sleeping threads at once, and each then waits for the GIL behind the
others (a critical job's start waits behind all of them). So a batch wakes at
most ``WAKE_AHEAD`` threads, and each thread that takes a job wakes the next one
only while jobs remain and no woken thread is still on its way: short jobs are
run by the few threads already awake, long (I/O) jobs spread over more threads
one hop at a time, as fast as each hop takes a job.

A worker claims more jobs than it has threads (prefetch), so jobs wait here. A
job submitted ``first`` (a critical one) must not wait behind them: it goes on a
second deque that every thread reads before the main one.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

# Threads woken and not yet running a job, at most: enough that a burst of long jobs
# fans out in a few hops, few enough that short jobs do not wake the whole pool.
WAKE_AHEAD = 2


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
        self._cond = threading.Condition(self._lock)
        self._items: deque[T] = deque()
        self._first: deque[T] = deque()
        self._sleeping = 0  # threads waiting for an item
        self._woken = 0  # of those, notified and not yet back with an item
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}_{n}", daemon=True)
            for n in range(count)
        ]
        self._started = False
        self._closed = False

    @property
    def waiting(self) -> int:
        """Items submitted that no thread has taken yet."""
        with self._lock:
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
            self._wake_more()

    def shutdown(self, *, wait: bool) -> None:
        """Drop what has not started, stop the threads, join them when ``wait``."""
        with self._lock:
            self._closed = True
            self._first.clear()
            self._items.clear()
            self._cond.notify_all()
        if wait and self._started:
            for thread in self._threads:
                thread.join()

    def _wake_more(self) -> None:
        """With the lock held: wake sleeping threads for the items left, keeping at most
        ``WAKE_AHEAD`` on their way."""
        left = len(self._items) + len(self._first)
        while self._woken < min(left, WAKE_AHEAD) and self._sleeping > self._woken:
            self._cond.notify()
            self._woken += 1

    def _take(self) -> T | None:
        """The next item (a ``first`` one before the rest), sleeping until there is one;
        None once shut down."""
        with self._lock:
            while not self._closed and not self._first and not self._items:
                self._sleeping += 1
                self._cond.wait()
                self._sleeping -= 1
                if self._woken:
                    self._woken -= 1
            if self._closed:
                return None
            item = self._first.popleft() if self._first else self._items.popleft()
            self._wake_more()
            return item

    def _serve(self) -> None:
        while True:
            item = self._take()
            if item is None:
                break
            try:
                self._run(item)
            except BaseException:
                # The runtime settles every job it runs; an error here is its own bug,
                # and must not cost the pool a thread.
                log.exception("handler thread: unexpected error")
