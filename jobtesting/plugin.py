"""The pytest plugin: ``fake_clock``, ``job_queue`` and ``job_producer`` fixtures, and
the ``jobs_eager(app)`` marker with its ``eager_jobs`` fixture.

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
    from jobtesting.eager_mode import Eager
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

EAGER_MARKER = "jobs_eager"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{EAGER_MARKER}(app, **options): every JobProducer the test builds without a "
        "transport of its own runs its jobs inline through app (jobtesting.eager)",
    )


@pytest.fixture(autouse=True)
def _jobs_eager_marker(request: pytest.FixtureRequest) -> Iterator[None]:
    """For a test marked ``jobs_eager(app)``: eager mode installed for every producer
    made during the test, even deep inside the code under test; gone after it.
    Unmarked tests pay a marker look-up and import nothing."""
    marker = request.node.get_closest_marker(EAGER_MARKER)
    if marker is None:
        yield
        return
    if len(marker.args) != 1:
        raise pytest.UsageError(
            f"@pytest.mark.{EAGER_MARKER} takes the worker App as its one argument, "
            f"got {len(marker.args)} positional arguments"
        )
    from jobtesting.eager_mode import eager
    from producer.transport import install_transport

    with eager(marker.args[0], **marker.kwargs) as jobs:
        previous = install_transport(jobs.transport)
        request.node.stash[_EAGER] = jobs
        try:
            yield
        finally:
            install_transport(previous)


@pytest.fixture
def eager_jobs(request: pytest.FixtureRequest, _jobs_eager_marker: None) -> Eager:
    """The eager mode of a test marked ``jobs_eager(app)``: what ran, for assertions
    (``eager_jobs.ran(type=...)``), and its ``producer``."""
    jobs: Eager | None = request.node.stash.get(_EAGER, None)
    if jobs is None:
        raise pytest.UsageError(
            f"eager_jobs needs the test marked @pytest.mark.{EAGER_MARKER}(app)"
        )
    return jobs


_EAGER = pytest.StashKey["Eager"]()
