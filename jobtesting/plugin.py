"""The pytest plugin: ``fake_clock``, ``job_queue`` and ``job_producer`` fixtures.

Registered through the ``pytest11`` entry point, so every pytest session of a project
that installs this package loads it: it imports nothing of the queue until a test
asks for a fixture (a session that uses none pays for this module only).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from jobtesting.clock import FakeClock
    from jobtesting.queue import MemoryQueue
    from producer.api import JobProducer


@pytest.fixture
def fake_clock() -> FakeClock:
    """The clock of ``job_queue``: move it with ``fake_clock.advance(seconds)``."""
    from jobtesting.clock import FakeClock

    return FakeClock()


@pytest.fixture
def job_queue(fake_clock: FakeClock) -> Iterator[MemoryQueue]:
    """A ``MemoryQueue`` on ``fake_clock``, closed after the test; while it is open
    every Kafka client the code under test builds is one of the memory cluster's."""
    from jobtesting.queue import MemoryQueue

    with MemoryQueue(clock=fake_clock) as queue:
        yield queue


@pytest.fixture
def job_producer(job_queue: MemoryQueue) -> JobProducer:
    """``job_queue``'s real ``JobProducer``."""
    return job_queue.producer()


# -- eager mode ---------------------------------------------------------------------
# The eager marker (jobs run inline at enqueue, ``jobtesting/eager.py``) is registered
# and handled here: its ``pytest_configure`` (``config.addinivalue_line("markers",
# ...)``, so that ``--strict-markers`` accepts it) and its fixture go below this line.
