"""The consumer loop's step is a list of named tasks: a timed one runs once per its
interval, and one that fails says which it was in the error the leasekeeper stops with."""

from __future__ import annotations

import pytest

from leasekeeper.kafka.loop_task import LoopTask
from leasekeeper.ops.service import _failure


def test_a_timed_task_runs_once_per_interval_and_an_untimed_one_every_step() -> None:
    runs: list[str] = []
    timed = LoopTask("expire leases", 0.5, lambda: runs.append("timed"))
    every = LoopTask("send the copies", 0, lambda: runs.append("every"))
    for now in (1.0, 1.2, 1.49, 1.5, 1.7, 2.0):
        timed.run_if_due(now)
        every.run_if_due(now)
    assert runs.count("every") == 6
    assert runs.count("timed") == 3, "at 1.0, 1.5 and 2.0"


def test_a_failing_task_names_itself_in_the_error() -> None:
    def broken() -> None:
        raise RuntimeError("store closed")

    task = LoopTask("promote the delayed jobs due", 0, broken)
    with pytest.raises(RuntimeError, match="store closed") as raised:
        task.run_if_due(1.0)
    assert raised.value.__notes__ == ["in the consumer loop's task: promote the delayed jobs due"]


def test_the_leasekeepers_failure_message_names_the_task() -> None:
    """What ``serve`` prints when it stops (exit 1) says where the loop failed."""

    def broken() -> None:
        raise RuntimeError("store closed")

    with pytest.raises(RuntimeError) as raised:
        LoopTask("expire leases", 0.5, broken).run_if_due(1.0)
    message = _failure(raised.value).message
    assert message == (
        "the Kafka loop failed: store closed (in the consumer loop's task: expire leases)"
    )
