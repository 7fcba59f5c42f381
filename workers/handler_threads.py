"""The threads that run ``def`` handlers, fed from one queue.

A ``ThreadPoolExecutor`` makes a ``Future`` (a ``Condition`` and its locks) and a
work item for every call, and tries to grow its pool on each submit; the runtime
never reads the future. Here a job is one tuple put on a ``SimpleQueue`` (a C
queue) and taken by whichever of the fixed threads is free: a no-op job's cost
is the handler, not the dispatch.

A worker claims more jobs than it has threads (prefetch), so jobs wait here. A
job submitted ``first`` (a critical one) must not wait behind them: it goes on a
second queue that every thread reads before the main one, and a wake-up marker
on the main queue reaches a thread that was idle. A thread that finds the
marker after the job was taken by another just goes on.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar, cast

log = logging.getLogger(__name__)

T = TypeVar("T")

# On the main queue: "a job is waiting on the first queue" (wakes an idle thread).
_WAKE = object()


class HandlerThreads(Generic[T]):
    """``count`` daemon threads calling ``run(item)`` for each item submitted.

    Daemon, like the event loop thread: a handler that outlives the shutdown grace
    must not keep the process alive (its lease was released already).
    """

    def __init__(self, count: int, run: Callable[[T], None], *, name: str) -> None:
        if count < 1:
            raise ValueError(f"handler threads must be at least 1, got {count}")
        self._run = run
        self._items: queue.SimpleQueue[T | object | None] = queue.SimpleQueue()
        self._first: queue.SimpleQueue[T] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}_{n}", daemon=True)
            for n in range(count)
        ]
        self._started = False
        self._closed = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            for thread in self._threads:
                thread.start()

    def submit(self, items: Iterable[T], *, first: Iterable[T] = ()) -> None:
        """Queue items for the threads; one call for a claimed batch. ``first`` run
        before every item queued earlier that has not started."""
        if self._closed:
            raise RuntimeError("handler threads are shut down")
        for item in first:
            self._first.put(item)
            self._items.put(_WAKE)
        for item in items:
            self._items.put(item)

    def shutdown(self, *, wait: bool) -> None:
        """Drop what has not started, stop the threads, join them when ``wait``."""
        self._closed = True
        for waiting in (self._first, self._items):
            while True:
                try:
                    waiting.get_nowait()
                except queue.Empty:
                    break
        for _ in self._threads:
            self._items.put(None)
        if wait and self._started:
            for thread in self._threads:
                thread.join()

    def _serve(self) -> None:
        first, items = self._first, self._items
        while True:
            item: T | object | None = _WAKE
            if not first.empty():
                with contextlib.suppress(queue.Empty):  # another thread took it
                    item = first.get_nowait()
            if item is _WAKE:
                item = items.get()
            if item is None:
                break
            if item is _WAKE:
                continue
            try:
                self._run(cast("T", item))
            except BaseException:
                # The runtime settles every job it runs; an error here is its own bug,
                # and must not cost the pool a thread.
                log.exception("handler thread: unexpected error")
