"""A claim waiting in the engine for work, woken one at a time (``LeaseEngine._wait``).

Kept apart from the engine, which only decides whom to wake; compiled with it.
"""

from __future__ import annotations

import threading


class Claimer:
    """A claim waiting for work: the types it runs (empty: any) and its condition."""

    __slots__ = ("cond", "types", "woken")

    def __init__(self, cond: threading.Condition, types: frozenset[str]) -> None:
        self.cond = cond
        self.types = types
        self.woken = False
