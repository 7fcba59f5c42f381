"""``LoopTask``: one named piece of the consumer loop's step, run every step or on a timer.

The step runs two fixed lists of these (``ConsumerLoop._each_step`` and ``_timed``),
so what the loop does after each fetch, in which order and how often, reads in one
place; and a task that fails names itself in the error the leasekeeper stops with.
"""

from __future__ import annotations

from collections.abc import Callable


class LoopTask:
    __slots__ = ("_last", "_run", "every_s", "name")

    def __init__(self, name: str, every_s: float, run: Callable[[], object]) -> None:
        self.name = name
        self.every_s = every_s  # 0: every step
        self._run = run
        self._last = 0.0

    def run_if_due(self, now: float) -> None:
        if self.every_s > 0:
            if now - self._last < self.every_s:
                return
            self._last = now
        self.run()

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:
            exc.add_note(f"in the consumer loop's task: {self.name}")
            raise
