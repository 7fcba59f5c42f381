"""Test handlers, enqueuers and whole flows without Kafka (see docs/testing.md).

``MemoryQueue`` enqueues with the real producer and runs jobs through the real
leasekeeper and worker code in-process, on a ``FakeClock``; the pytest plugin
(``jobtesting.plugin``) gives ``job_queue``, ``job_producer`` and ``fake_clock``.
``eager(app)`` runs jobs inline at enqueue instead (``jobtesting.eager_mode``), and
staged ones at commit (``jobtesting.outbox``).

Nothing heavy is imported until a name is used: the plugin loads this package in
every test session of a project that installs it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobtesting.clock import FakeClock
    from jobtesting.eager_mode import Eager, EagerJobDead, EagerRun, eager
    from jobtesting.outbox import EagerOutbox
    from jobtesting.queue import MemoryQueue
    from jobtesting.report import Attempt, DrainLimit, DrainReport, End, JobRun

__all__ = [
    "Attempt",
    "DrainLimit",
    "DrainReport",
    "Eager",
    "EagerJobDead",
    "EagerOutbox",
    "EagerRun",
    "End",
    "FakeClock",
    "JobRun",
    "MemoryQueue",
    "eager",
]

_HOMES = {
    "FakeClock": "jobtesting.clock",
    "MemoryQueue": "jobtesting.queue",
    "Attempt": "jobtesting.report",
    "DrainLimit": "jobtesting.report",
    "DrainReport": "jobtesting.report",
    "End": "jobtesting.report",
    "JobRun": "jobtesting.report",
    "Eager": "jobtesting.eager_mode",
    "EagerJobDead": "jobtesting.eager_mode",
    "EagerRun": "jobtesting.eager_mode",
    "eager": "jobtesting.eager_mode",
    "EagerOutbox": "jobtesting.outbox",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'jobtesting' has no attribute {name!r}")
    return getattr(import_module(home), name)
