"""The slots of ``async def`` handlers, with a way to the front for critical jobs.

A worker holds more jobs than it runs (prefetch); the async ones wait for a slot
here. ``asyncio.Semaphore`` wakes its waiters in arrival order, so a critical job
claimed after a batch of bulk jobs would wait for all of them. A waiter marked
``first`` gets the next free slot before every other waiter. Everything here runs
on the worker's one event loop thread.
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["AsyncSlots"]


class AsyncSlots:
    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"async slots must be at least 1, got {slots}")
        self._free = slots
        self._first: deque[asyncio.Future[None]] = deque()
        self._rest: deque[asyncio.Future[None]] = deque()

    async def acquire(self, *, first: bool = False) -> None:
        """Wait for a slot; a ``first`` waiter is served before the others."""
        if self._free > 0 and not self._first and not self._rest:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        (self._first if first else self._rest).append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot just as it was cancelled: pass it on
            raise

    def release(self) -> None:
        """Hand the slot to the next waiter (first ones first), or free it."""
        for waiters in (self._first, self._rest):
            while waiters:
                waiter = waiters.popleft()
                if not waiter.done():  # a cancelled waiter is done: skipped
                    waiter.set_result(None)
                    return
        self._free += 1
